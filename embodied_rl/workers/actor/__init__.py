"""The actor: FSDP2-wrapped policy, its optimizer and scheduler, and the batch contract it trains on."""

# Files of the actor part of a checkpoint (actor/checkpoint.py): the state written by rank 0, and
# the trainable weights of checkpoints written before they were sharded (read, never written).
STATE_FILE, WEIGHTS_FILE = "actor_state.pt", "trainable.safetensors"
#: The optimizer group of the critic's weights (optim.py names it; updates read its learning rate).
CRITIC_GROUP = "value_head"
