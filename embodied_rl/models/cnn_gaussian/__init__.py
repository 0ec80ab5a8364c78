"""A pixel Gaussian policy: ManiSkill's ppo_rgb design (NatureCNN + state MLP, learned log-std)."""
