"""OpenVLA-OFT (parallel-decoding, discrete action tokens) as an RL policy.

`policy.OpenVLAOFTPolicy` registers "openvla_oft"; the model registry imports it on first use,
not with this package: the config loader imports `configuration` from here, and validating a
config should not cost seconds of torch, transformers and peft imports.
"""
