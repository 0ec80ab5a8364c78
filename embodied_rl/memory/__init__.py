"""The memory plan: per device, what a run's processes need, forecast before anything starts
(`embodied-rl plan`, and a check at the start of every run). See plan.py for what it covers."""
