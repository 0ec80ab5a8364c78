"""Schema of the runtime sections: `cluster`, `runner`, `env` (group level), `rollout`, `actor`.

Key names follow RLinf's YAML reference where the concept exists. Only keys the runtime
acts on are listed: a key that is accepted and ignored is a bug (see docs/CONFIG.md).
Choices are `Literal` types so the loader rejects a wrong value with the list of valid ones.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from embodied_rl.config.schema.env import EnvConfig
from embodied_rl.config.schema.health import HealthConfig
from embodied_rl.config.schema.model import ModelConfig, model_config

Dtype = Literal["fp32", "bf16", "fp16"]


@dataclass
class ClusterConfig:
    num_nodes: int = field(default=1, metadata={"help": "Nodes of the Ray cluster to use; the run waits until this many are connected."})
    component_placement: dict[str, str] = field(
        default_factory=lambda: {"actor,env,rollout": "all"},
        metadata={"merge": "replace", "help": "Mapping 'component[,component...]' -> ranks: 'all', '3', '0,2', '0-3', '0-3,5'; 'ranks:processes' (e.g. '0-1:0-3') runs more processes than slots. Ranks are GPUs (CPU worker slots on a machine without GPUs). A config that sets it replaces the default mapping as a whole."},
    )
    address: str | None = field(default=None, metadata={"help": "Ray address of an existing cluster (e.g. 10.0.0.1:6379); null = $RAY_ADDRESS if set, else start Ray locally."})
    device_memory_gb: float | None = field(default=None, metadata={"help": "Memory of one device in GiB for the memory plan checked before start (`embodied-rl plan`): a GPU's on GPU nodes, a node's RAM on CPU nodes; null = read from this machine. Set it to plan for a machine you are not on."})
    num_cpu_slots: int | None = field(default=None, metadata={"help": "On nodes without GPUs: worker slots per node that placement ranks refer to (processes on one slot share one CPU); null = the node's CPU count."})


@dataclass
class LoggerConfig:
    log_path: str = field(default="${runner.output_dir}/${runner.experiment_name}", metadata={"help": "Run directory: resolved config, metrics, checkpoints and videos go here."})
    project_name: str = field(default="embodied_rl", metadata={"help": "wandb project name."})
    experiment_name: str = field(default="${runner.experiment_name}", metadata={"help": "Run name shown by wandb (TensorBoard and the console use the run directory)."})
    logger_backends: list[str] = field(
        default_factory=lambda: ["console", "tensorboard"],
        metadata={"help": "Metric sinks, names of embodied_rl.sinks.METRIC_SINKS: console | tensorboard | wandb (wandb runs offline when no API key is configured), or a plug-in's; metrics.jsonl is always written."},
    )


@dataclass
class RunnerConfig:
    experiment_name: str = field(default="default", metadata={"help": "Name of the run; the run directory is <output_dir>/<experiment_name>."})
    output_dir: str = field(default="runs", metadata={"help": "Parent directory of run directories (relative to the working directory)."})
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    max_steps: int = field(default=10, metadata={"help": "Training steps (rollout -> advantages -> update -> weight sync) before the run stops."})
    val_check_interval: int = field(default=-1, metadata={"help": "Run an evaluation rollout on env.eval every N training steps and after the last one; -1 = never."})
    val_before_train: bool = field(default=False, metadata={"help": "Evaluate on env.eval before the first training step (logged as step 0), the baseline the later evaluations compare with; not on resume."})
    critic_warmup: int = field(default=0, metadata={"help": "First N training steps update only the critic (value head): the policy's weights and optimizer state stay as they are, so the critic learns to predict returns of the starting policy before its advantages move that policy; 0 = off. Counts toward max_steps."})
    save_interval: int = field(default=-1, metadata={"help": "Save a checkpoint every N training steps (and always at the end and on Ctrl-C); -1 = only at the end and on Ctrl-C."})
    max_restarts: int = field(default=3, metadata={"help": "When a worker process dies during training (killed, out of memory, node lost), stop the others, start all groups again and resume from the last checkpoint (the start if none), at most this many times per run; 0 = end the run. A worker that raises an error is never restarted (it would fail again)."})
    paradigm: str = field(default="rl", metadata={"help": "The actor's update, a name of embodied_rl.workers.actor.updates.UPDATES: rl | sft, or a plug-in's. rl: rollout -> advantages -> PPO/GRPO update on env.train; sft: supervised fine-tuning on the demonstrations of data.train_data_paths (what `embodied-rl sft` sets). Evaluation, checkpoints, resume and logging are the same for all; max_steps counts optimizer steps in SFT."})
    only_eval: bool = field(default=False, metadata={"help": "Evaluate the policy on env.eval without training (what `embodied-rl eval` sets)."})
    resume_dir: str | None = field(default=None, metadata={"help": "Checkpoint directory to resume training from (weights, optimizer, scheduler, RNG, step); 'latest' = newest in this run directory."})
    ckpt_path: str | None = field(default=None, metadata={"help": "Checkpoint to load the policy weights from before training or evaluation (not the optimizer); null = actor.model.model_path only."})
    seed: int = field(default=1234, metadata={"help": "Global seed (Python, NumPy, torch) of the driver and every worker (offset by worker rank)."})
    save_best: bool = field(default=False, metadata={"help": "Keep checkpoints/best beside the latest: the checkpoint of the evaluation with the highest success so far (the primary scoring's eval/success_once), so a run that collapses later still leaves its best policy (`embodied-rl export RUN_DIR/checkpoints/best OUT`). Needs evaluations during training (runner.val_check_interval)."})
    health: HealthConfig = field(default_factory=HealthConfig)


@dataclass
class DataConfig:
    train_data_paths: list[str] = field(default_factory=list, metadata={"help": "Demonstration directories written by `embodied-rl demos` for runner.paradigm=sft, or for RL with algorithm.bc_coef > 0 (concatenated; each is checked against env.train and actor.model before the run starts); must be empty for RL otherwise."})
    action_noise_std: float = field(default=0.0, metadata={"help": "Gaussian noise added to every normalised demo action (range [-1, 1]) each time a sample is drawn, before the policy records it as its action record, in SFT and in RL's BC term. The policy then learns a spread of actions around the expert's, so sampling at temperature 1 explores near the expert action instead of far from it; 0 = the exact expert actions. In [0, 0.5]; needs data.train_data_paths."})


@dataclass
class ChannelConfig:
    name: str = field(default="env_buffer_list", metadata={"help": "Channel name; workers that name the same channel exchange data through it."})
    queue_name: str = field(default="obs_buffer", metadata={"help": "Queue within the channel this component writes to."})
    queue_size: int = field(default=0, metadata={"help": "Bound of the queue in batches (a full queue blocks the producer); 0 = unbounded."})


@dataclass
class EnvGroupConfig:
    group_name: str = field(default="EnvGroup", metadata={"help": "Name of the env worker group: its Ray actors are named <group_name>_<rank> in the run's Ray namespace (ray list actors, dashboard) and errors name it."})
    channel: ChannelConfig = field(default_factory=ChannelConfig)
    train: EnvConfig = field(default_factory=EnvConfig)
    eval: EnvConfig = field(default_factory=lambda: EnvConfig(reset_id_split="eval"))  # held-out states


@dataclass
class RolloutModelConfig:
    model_path: str = field(default="${actor.model.model_path}", metadata={"help": "Checkpoint the rollout workers load before the first weight sync."})


@dataclass
class RolloutConfig:
    group_name: str = field(default="RolloutGroup", metadata={"help": "Name of the rollout worker group (Ray actors <group_name>_<rank>)."})
    channel: ChannelConfig = field(
        default_factory=lambda: ChannelConfig(name="${env.channel.name}", queue_name="action_buffer"),
    )
    backend: Literal["huggingface", "vllm"] = field(default="huggingface", metadata={"help": "Inference engine of the rollout workers (models/rollout_backends.py): huggingface (batched torch forward of the policy) | vllm (OpenVLA-OFT in a vLLM engine, in actor.model.precision as the huggingface backend: bidirectional attention, no offload; install with `bash scripts/setup.sh --vllm`)."})
    pipeline_stage_num: int = field(default=1, metadata={"help": "Env sub-batches per worker that alternate between stepping and inference; 2 overlaps env stepping with policy inference, 1 = no overlap."})
    enable_offload: bool = field(default=False, metadata={"help": "Move the rollout model off the accelerator while the actor trains (collocated placement)."})
    gpu_memory_utilization: float | None = field(default=None, metadata={"help": "rollout.backend=vllm: fraction in (0, 1] of its GPU's memory each vLLM engine reserves (vLLM's gpu_memory_utilization; the engine refuses to start unless that much is free). null = derived from cluster.component_placement: 0.9 split evenly among the rollout workers and actor ranks on the most crowded GPU that holds an engine (0.9 alone, 0.45 beside an actor rank; the rest is left to CUDA contexts and env workers: set it lower beside a GPU simulator). vLLM's CPU build sizes its cache by VLLM_CPU_KVCACHE_SPACE instead. Refused with rollout.backend=huggingface."})
    model: RolloutModelConfig = field(default_factory=RolloutModelConfig)


@dataclass
class OptimConfig:
    lr: float = field(default=1.0e-4, metadata={"help": "AdamW learning rate of the policy parameters."})
    value_lr: float = field(default=3.0e-3, metadata={"help": "AdamW learning rate of the value head (its own parameter group)."})
    adam_beta1: float = field(default=0.9, metadata={"help": "AdamW beta1."})
    adam_beta2: float = field(default=0.999, metadata={"help": "AdamW beta2."})
    adam_eps: float = field(default=1.0e-5, metadata={"help": "AdamW epsilon."})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW decoupled weight decay."})
    clip_grad: float = field(default=1.0, metadata={"help": "Clip the global gradient norm to this value (an asymmetric critic's, actor.model.value_input: privileged_state, apart from the policy's); <= 0 = no clipping (the norm is still logged)."})
    lr_scheduler: Literal["constant", "cosine", "linear"] = field(default="constant", metadata={"help": "Learning-rate schedule over runner.max_steps after warm-up: constant | cosine | linear (decay to min_lr)."})
    lr_warmup_steps: int = field(default=0, metadata={"help": "Training steps of linear warm-up from 0 to lr (and value_lr)."})
    min_lr: float = field(default=0.0, metadata={"help": "Final learning rate of the cosine and linear schedules."})


@dataclass
class MixedPrecisionConfig:
    param_dtype: Dtype = field(default="${actor.model.precision}", metadata={"help": "Dtype of parameters in forward/backward: fp32 | bf16 | fp16."})
    reduce_dtype: Dtype = field(default="fp32", metadata={"help": "Dtype of the gradient reduce-scatter/all-reduce."})


@dataclass
class FSDPConfig:
    sharding_strategy: Literal["full_shard", "shard_grad_op", "no_shard"] = field(
        default="full_shard",
        metadata={"help": "full_shard: params re-sharded after forward; shard_grad_op: kept gathered until backward ends; no_shard: replicated (DDP-like)."},
    )
    mixed_precision: MixedPrecisionConfig = field(default_factory=MixedPrecisionConfig)
    cpu_offload: bool = field(default=False, metadata={"help": "Keep sharded parameters, gradients and optimizer state in CPU memory (FSDP2 CPUOffloadPolicy)."})


@dataclass
class ActorConfig:
    group_name: str = field(default="ActorGroup", metadata={"help": "Name of the actor (training) worker group (Ray actors <group_name>_<rank>)."})
    training_backend: Literal["fsdp"] = field(default="fsdp", metadata={"help": "Training engine: fsdp (torch FSDP2; gloo on CPU, NCCL on GPU)."})
    micro_batch_size: int | None = field(default=None, metadata={"help": "Samples per forward/backward on each actor process; gradients are accumulated up to global_batch_size. null = global_batch_size / actor processes (no accumulation), derived at start."})
    global_batch_size: int | None = field(default=None, metadata={"help": "Samples (chunks) per optimizer step over all actor ranks; a multiple of micro_batch_size x actor processes that divides the rollout batch. null = the whole rollout batch (one optimizer step per update epoch), derived from the machine at start."})
    enable_offload: bool = field(default=False, metadata={"help": "Move weights, gradients and optimizer state to CPU while the rollout runs (collocated placement)."})
    seed: int = field(default="${runner.seed}", metadata={"help": "Seed of parameter initialisation (value head, LoRA) and minibatch shuffling."})  # type: ignore[assignment]
    model: ModelConfig = field(default_factory=model_config)
    optim: OptimConfig = field(default_factory=OptimConfig)
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
