"""The actor: FSDP2-wrapped policy, its optimizer and scheduler, and the batch contract it trains on."""

# The actor part of a checkpoint (written by ActorWorker.save_checkpoint on rank 0, under actor/).
WEIGHTS_FILE, OPTIM_FILE, STATE_FILE = "trainable.safetensors", "optimizer.pt", "actor_state.pt"
