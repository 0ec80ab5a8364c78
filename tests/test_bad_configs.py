"""A catalogue of configs users get wrong: each is refused before anything starts.

For every case, `embodied-rl train|eval` must exit 2 with one line on stderr naming the key,
print no traceback, and leave no trace: no Ray session, no child process, no model file, no run
directory. The cases run through the real CLI entry in one fresh interpreter (a test process
may already hold a Ray session, which would hide one started by mistake); two of them also
run as the installed `embodied-rl` command.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXISTING_56PX = "existing/tiny-56px"
# The default config's asymmetric critic off, for cases about runs that train no critic.
NO_CRITIC = ["runner.critic_warmup=0", "actor.model.value_input=hidden", "actor.model.privileged_state_dim=null", "env.train.init_params.privileged_state=false"]
FROM_56PX = ["maniskill_ppo_tiny", f"actor.model.model_path={EXISTING_56PX}", "actor.model.create_preset=null"]

# (command, arguments, expected part of the error line)
CASES: list[tuple[str, list[str], str]] = [
    # sizes that do not fit the machine or each other
    ("train", ["env.train.total_num_envs=3"], "env.train.total_num_envs=3 must be a multiple of env workers"),
    ("train", ["env.train.total_num_envs=-1"], "env.train.total_num_envs: must be >= 1"),
    ("train", ["env.eval.total_num_envs=5"], "env.eval.total_num_envs=5 must be a multiple"),
    ("train", ["algorithm.n_minibatches=1", "actor.global_batch_size=7"], "actor.global_batch_size=7 must be a multiple of actor.micro_batch_size"),
    ("train", ["algorithm.n_minibatches=1", "actor.global_batch_size=6", "actor.micro_batch_size=3"], "actor.global_batch_size=6 must divide the rollout batch"),
    ("train", ["actor.micro_batch_size=0"], "actor.micro_batch_size: must be >= 1"),
    ("train", ["rollout.pipeline_stage_num=0"], "rollout.pipeline_stage_num: must be >= 1"),
    ("train", ["cluster.num_cpu_slots=0"], "cluster.num_cpu_slots: must be >= 1"),
    ("train", ["cluster.num_nodes=2"], "cluster.num_nodes=2 needs a running Ray cluster"),
    ("train", ["cluster.address=walk"], "cluster.address=walk: expected host:port of a Ray head node"),
    # the asymmetric critic's input size against the task's privileged state
    ("train", ["env.train=maniskill_pick_cube"], "actor.model.privileged_state_dim=36 but env.train (maniskill PickCube-v1) gives a 43-d privileged state"),
    # placement
    ("train", ['cluster.component_placement={"actor,env,rolout": all}'], "unknown component 'rolout'"),
    ("train", ["cluster.component_placement={actor: 0-5, env: all, rollout: all}"], "rank 5 out of range"),
    ("train", ["cluster.component_placement={env: all, rollout: all}"], "cluster.component_placement has no entry for 'actor'"),
    ("train", ["cluster.component_placement={actor: all, env: 0, rollout: 0-1}"], "env processes must be a multiple of 2 rollout processes"),
    ("train", ["cluster.component_placement=actor"], "takes a mapping, got 'actor'; quote the whole override"),
    ("train", ["runner.max_restarts=-1"], "runner.max_restarts: must be >= 0"),
    # held-out evaluation
    ("eval", ["env.eval.reset_id_split=train"], "env.eval.reset_id_split=train shares initial states with env.train.reset_id_split=train"),
    ("train", ["env.train.reset_id_split=all"], "env.eval.reset_id_split=eval shares initial states with env.train.reset_id_split=all"),
    # episodes and groups
    ("train", ["env.train.max_episode_steps=0"], "env.train.max_episode_steps: must be >= 1"),
    ("train", ["algorithm.group_size=2"], "algorithm.group_size=2 and env.train.group_size=1 must be equal"),
    ("train", ["env.train.reward_coef=.nan"], "env.train.reward_coef: must be a finite number"),
    ("train", ["env.train.action_adapter.scale=[1.0, 2.0]"], "env.train.action_adapter.scale has 2 values"),
    ("train", ["env.eval.subproc.step_timeout_s=0"], "env.eval.subproc.step_timeout_s: must be > 0"),
    # env servers
    ("train", ["env.train.server.python=/no/such/python"], "env.train.server.python=/no/such/python does not exist"),
    ("train", ["env.train.server.address=nohost"], "env.train.server.address: expected HOST:PORT"),
    ("train", ["env.train.server.address=127.0.0.1:7600"], "needs the server's connection key: set EMBODIED_RL_ENV_SERVER_KEY"),
    ("train", ["env.train.server={python: /usr/bin/python3, address: 'h:1'}"], "env.train.server: set one of server.python"),
    ("train", ["env.train.init_params.obs_mode=state"], "env.train.init_params.obs_mode: expected one of 'rgb', got 'state'"),
    ("train", ["+env.train.init_params.bogus=1"], "bogus"),
    ("train", ["env.train=no_such_task"], "env.train: unknown env config 'no_such_task'"),
    ("train", ["env.train=missing/task.yaml"], "env.train: env config file not found: missing/task.yaml"),
    # distribution shifts (env_configs/*_shift_*.yaml, init_params.shift)
    ("eval", ["env.eval=maniskill_push_cube_shift_dim_light", "env.eval.init_params.shift.light_scale=0"],
     "env.eval.init_params.shift: light_scale=0.0 must be in (0, 4]"),
    ("eval", ["env.eval=maniskill_stack_cube", "+env.eval.init_params.shift.object_scale=1.5"],
     "env.eval.init_params: shift.object_scale is not supported: StackCube-v1 does not support it"),
    # algorithm and critic
    ("train", ["actor.model.add_value_head=false"], "algorithm.adv_type=gae trains a critic: set actor.model.add_value_head=true"),
    ("train", ["actor.model.value_type=action_level"], "set actor.model.value_type=chunk_level"),
    ("train", [*NO_CRITIC, "algorithm.adv_type=grpo"], "needs algorithm.group_size >= 2"),
    ("train", ["algorithm.group_baseline=true"], "algorithm.group_baseline=true needs algorithm.group_size >= 2"),
    ("train", [*NO_CRITIC, "algorithm.adv_type=grpo", "algorithm.group_size=2", "env.train.group_size=2", "algorithm.group_baseline=true"],
     "algorithm.group_baseline=true corrects GAE advantages, but adv_type=grpo"),
    ("train", ["algorithm.adv_type=ppo"], "adv_type"),
    ("train", ["algorithm.gamma=1.5"], "algorithm.gamma=1.5 must be in [0, 1]"),
    ("train", ["algorithm.kl_penalty=full", "algorithm.kl_beta=0.1"], "kl_penalty"),
    ("eval", ["algorithm.sampling_params.eval_scoring=[greedy, greedy]"], "algorithm.sampling_params.eval_scoring=[greedy, greedy] repeats a scoring"),
    ("train", ["actor.model.top_k=null", "actor.model.logprobs_over=all_bins"],
     "actor.model.logprobs_over: all_bins only differs from top_k when top_k is set"),
    ("train", ["algorithm.use_kl_loss=true", "algorithm.kl_loss_coef=0"], "kl_loss_coef"),
    ("train", ["algorithm.kl_penalty=abs"], "algorithm.kl_penalty=abs picks the estimator of a KL this run never computes"),
    ("train", ["runner.critic_warmup=20", "runner.max_steps=20"], "runner.critic_warmup=20 leaves no policy update in runner.max_steps=20"),
    ("train", [*NO_CRITIC, "runner.critic_warmup=2", "algorithm.adv_type=grpo", "algorithm.group_size=2", "env.train.group_size=2",
               "algorithm.bootstrap_type=standard"], "runner.critic_warmup=2 warms up a critic"),
    ("train", [*NO_CRITIC, "algorithm.adv_type=grpo", "algorithm.group_size=2", "env.train.group_size=2"],
     "algorithm.bootstrap_type=none changes how a critic's values continue a truncated episode"),
    # optimizer
    ("train", ["actor.optim.lr=-1e-4"], "actor.optim.lr: must be >= 0"),
    ("train", ["actor.optim.value_lr=-1"], "actor.optim.value_lr: must be >= 0"),
    ("train", [*NO_CRITIC, "actor.optim.lr=0", "actor.optim.min_lr=0", "actor.model.add_value_head=false", "algorithm.adv_type=grpo",
               "algorithm.group_size=2", "env.train.group_size=2", "algorithm.bootstrap_type=standard"],
     "actor.optim.lr=0 freezes the policy and nothing else would train"),
    ("train", ["actor.optim.min_lr=1.0"], "actor.optim.min_lr=1.0 must be in [0, actor.optim.lr"),
    ("train", ["actor.optim.adam_beta1=1.0"], "adam_beta1/adam_beta2 must be in [0, 1)"),
    # precision, devices, engines
    ("train", ["actor.model.attn_implementation=flash_attention_2"], "flash_attention_2 runs only in fp16/bf16"),
    ("train", ["actor.model.attn_implementation=flash_attention_2", "actor.model.precision=bf16"], "flash_attention_2 needs CUDA GPUs"),
    ("train", ["actor.model.attn_implementation=flash_attention_2", "actor.model.precision=bf16", "actor.fsdp_config.mixed_precision.param_dtype=fp32"],
     "flash_attention_2 runs only in fp16/bf16, but actor.fsdp_config.mixed_precision.param_dtype=fp32: set actor.fsdp_config.mixed_precision.param_dtype=bf16"),
    ("train", ["actor.fsdp_config.mixed_precision.param_dtype=fp16"], "param_dtype=fp16 needs loss scaling"),
    ("train", ["actor.enable_offload=true"], "actor.enable_offload=true needs GPUs"),
    ("train", ["rollout.enable_offload=true"], "rollout.enable_offload=true needs GPUs"),
    ("train", ["actor.fsdp_config.cpu_offload=true"], "actor.fsdp_config.cpu_offload=true needs GPUs"),
    ("train", ["env.train.init_params.sim_backend=gpu", "env.train.init_params.robot_visual_cell=null"], "sim_backend=gpu needs CUDA GPUs"),
    ("train", ["env.train.init_params.sim_backend=gpu"], "env.train.init_params: robot_visual_cell=0.008 simplifies the CPU sim's meshes"),
    ("train", ["env.train.init_params.robot_visual_cell=0.2"], "env.train.init_params: robot_visual_cell=0.2 must be in (0, 0.05] metres"),
    ("eval", ["env.eval.init_params.render_backend=gpu"], "render_backend=gpu needs CUDA GPUs"),
    ("train", ["rollout.backend=sglang"], "rollout.backend: expected one of 'huggingface', 'vllm'"),
    ("train", ["rollout.backend=vllm", "actor.model.attention_mode=causal"], "actor.model.attention_mode=causal with rollout.backend=vllm"),
    ("train", ["rollout.gpu_memory_utilization=1.5"], "rollout.gpu_memory_utilization=1.5: must be in (0, 1]"),
    ("train", ["rollout.gpu_memory_utilization=0.5"], "rollout.gpu_memory_utilization=0.5 sizes a vLLM engine, but rollout.backend=huggingface"),
    ("train", ["actor.training_backend=megatron"], "actor.training_backend: expected one of 'fsdp'"),
    # model and checkpoint files
    ("train", ["actor.model.model_path=nowhere/model", "actor.model.create_preset=null"], "actor.model.model_path=nowhere/model: no checkpoint there"),
    ("train", ["actor.model.is_lora=true", "actor.model.lora_path=nowhere/adapters"], "actor.model.lora_path=nowhere/adapters: no adapter_config.json"),
    # a checkpoint made elsewhere (by the fixture) at 56 px, where the config's preset is 64 px
    ("train", ["maniskill_ppo_tiny", f"actor.model.model_path={EXISTING_56PX}"],
     f"actor.model.create_preset: actor.model.model_path={EXISTING_56PX} holds a checkpoint that is not the tiny preset at 64 px"),
    ("train", ["maniskill_ppo_tiny", "actor.model.create_preset.name=tiny7b"], "actor.model.create_preset.name='tiny7b' is not a preset"),
    # a checkpoint that does not fit the env: the 56 px one started from as it is, the shipped SFT policy (64 px demos)
    ("train", [*FROM_56PX, "env.train.init_params.camera_heights=32", "env.train.init_params.camera_widths=32"],
     (f"actor.model.model_path={EXISTING_56PX} takes 56 px images (config.json image_sizes), but "
      "env.train.init_params.camera_heights x camera_widths = 32x32 is smaller")),
    ("train", [*FROM_56PX, "actor.model.use_proprio=true", "actor.model.proprio_dim=9"],
     f"actor.model.proprio_dim=9 but actor.model.model_path={EXISTING_56PX} takes 8 proprio dims (identity in dataset_statistics.json)"),
    ("train", [*FROM_56PX, "actor.model.use_proprio=true"], "actor.model.proprio_dim=8 (use_proprio) but env.train gives a 12-d state"),
    ("train", [*FROM_56PX, "actor.model.num_images_in_input=2"],
     f"actor.model.num_images_in_input=2 but actor.model.model_path={EXISTING_56PX} takes 1 camera image(s) per sample"),
    ("train", ["env.train.init_params.camera_heights=128"],
     ("tiny-oft-push-cube-sft learned from 64x64 px camera images (demos_manifest.json), but "
      "env.train.init_params.camera_heights x camera_widths = 128x64; set env.train.init_params.camera_heights=64")),
    ("train", ["env.eval.init_params.control_mode=pd_joint_delta_pos"],
     "actor.model.action_dim=7 but the controller of env.eval (init_params.control_mode=pd_joint_delta_pos) takes 8-d actions"),
    ("train", ["actor.model.model_type=octo"], "actor.model.model_type"),
    ("train", ["runner.ckpt_path=nowhere/ckpt"], "runner.ckpt_path loads weights for evaluation only"),
    ("eval", ["runner.ckpt_path=nowhere/ckpt"], "runner.ckpt_path=nowhere/ckpt: no such directory"),
    ("train", ["runner.resume_dir=latest"], "runner.resume_dir=latest: no complete checkpoint"),
    ("eval", ["runner.resume_dir=latest"], "runner.resume_dir continues training"),
    # comparing two policies (eval --compare A B): the paths and the fixed initial states
    ("eval", ["--compare", "nowhere/a", "models/tiny-oft-push-cube-sft"], "--compare A=nowhere/a: no such directory"),
    ("eval", ["--compare", EXISTING_56PX, EXISTING_56PX, "env.eval.use_fixed_reset_state_ids=false"],
     "--compare pairs episodes by initial state: set env.eval.use_fixed_reset_state_ids=true"),
    # demonstrations and SFT (maniskill_sft_tiny names demos/push_cube_64, absent here)
    ("sft", [], ("data.train_data_paths[0]: demos/push_cube_64: no such demo directory; record them with "
                 "`embodied-rl demos maniskill_sft_tiny --num-demos N --out demos/push_cube_64`")),
    ("sft", ["data.train_data_paths=[]"], "runner.paradigm=sft needs data.train_data_paths"),
    ("sft", ["actor.global_batch_size=null"], "actor.global_batch_size: SFT needs a number of demo samples"),
    ("train", ["data.train_data_paths=[demos/push_cube_64]", "algorithm.bc_coef=0"], "data.train_data_paths is read by SFT, or by RL with algorithm.bc_coef > 0"),
    ("train", ["algorithm.bc_coef=0.1"], "algorithm.bc_coef=0.1 clones demonstrations, but data.train_data_paths is empty"),
    ("train", ["algorithm.bc_coef=-1"], "algorithm.bc_coef=-1.0 must be >= 0"),
    ("sft", ["algorithm.bc_coef=0.5"], "algorithm.bc_coef=0.5 adds behaviour cloning to RL, but runner.paradigm=sft"),
    ("sft", ["data.action_noise_std=0.9"], "data.action_noise_std=0.9: must be in [0, 0.5]"),
    ("train", ["data.action_noise_std=0.05"], "data.action_noise_std=0.05 perturbs demo actions, but data.train_data_paths is empty"),
    ("train", ["runner.paradigm=dagger"], "runner.paradigm='dagger' is not valid; choose one of: rl, sft"),
    # runner, logger, typos
    ("train", ["runner.max_steps=0"], "runner.max_steps: must be >= 1"),
    ("train", ["runner.save_interval=0"], "runner.save_interval: must be >= 1, or -1"),
    ("train", ["runner.val_check_interval=-2"], "runner.val_check_interval: must be >= 1, or -1"),
    ("train", ["runner.logger.logger_backends=[console, console]"], "duplicate entries"),
    ("train", ["runner.logger.logger_backends=[mlflow]"], "logger_backends"),
    ("train", ["runner.max_step=3"], "runner.max_step"),
    ("train", ["env.group_name=has space"], "env.group_name='has space'"),
    # closed sets: each value against the simulator's registry or the model it describes, "did you mean"
    ("train", ["env.train.init_params.id=PushCub-v1"],
     "env.train.init_params.id='PushCub-v1' is not a ManiSkill task; did you mean env.train.init_params.id=PushCube-v1?"),
    ("print-config", ["env.eval.init_params.id=pushcube-v1"], "did you mean env.eval.init_params.id=PushCube-v1?"),
    ("train", ["env.eval.init_params.control_mode=pd_ee_delta_pse"],
     "env.eval.init_params.control_mode='pd_ee_delta_pse' is not a control mode of panda; did you mean env.eval.init_params.control_mode=pd_ee_delta_pose?"),
    ("print-config", ["env.train.init_params.control_mode=ee_delta_pose"], "did you mean env.train.init_params.control_mode=pd_ee_delta_pose?"),
    ("train", ["+env.train.init_params.robot_uids=panda_wristcm"],
     "env.train.init_params.robot_uids='panda_wristcm' is not a ManiSkill robot; did you mean env.train.init_params.robot_uids=panda_wristcam?"),
    ("train", ["env.train.init_params.main_camera=base_cam"],
     "env.train.init_params.main_camera='base_cam' is not a camera of PushCube-v1 with panda; did you mean env.train.init_params.main_camera=base_camera?"),
    ("train", ["+env.eval.init_params.robot_uids=panda_wristcam", "env.eval.init_params.wrist_camera=hand_cam"],
     "env.eval.init_params.wrist_camera='hand_cam' is not a second camera of PushCube-v1 with panda_wristcam; did you mean env.eval.init_params.wrist_camera=hand_camera?"),
    ("train", ["env.train.init_params.wrist_camera=hand_camera"],
     "env.train.init_params.wrist_camera='hand_camera' is not a second camera of PushCube-v1 with panda; valid: auto, none"),
    ("train", ["libero_grpo_tiny", "env.train.init_params.task_suite_name=libero_spatail"],
     "init_params.task_suite_name='libero_spatail' is not a LIBERO suite; did you mean init_params.task_suite_name=libero_spatial?"),
    ("print-config", ["libero_grpo_tiny", "env.eval.init_params.task_suite_name=libero_100"], "did you mean init_params.task_suite_name=libero_10?"),
    ("train", ["libero_grpo_tiny", "env.eval.init_params.task_ids=[3, 10]"],
     "init_params.task_ids [3, 10] must be distinct integers in [0, 10) (libero_spatial has 10 tasks in LIBERO's benchmark registry)"),
    ("train", ["actor.model.num_images_in_input=3", "actor.model.create_preset={name: tiny, image_size: 64}"],
     "actor.model.num_images_in_input=3: environments give at most 2 camera images (main + wrist); set it to 1 or 2"),
    ("train", ["actor.model.image_size=56"], "actor.model.image_size=56 but actor.model.model_path="),
    ("train", ["maniskill_ppo_tiny", "actor.model.image_size=56"],
     "actor.model.image_size=56 but actor.model.create_preset.image_size=64 makes the model take 64 px images; set actor.model.image_size=64 or null"),
    ("train", ["maniskill_ppo_tiny", "env.eval.init_params.camera_widths=48"],
     "actor.model.create_preset.image_size=64 makes a model that takes 64 px images, but env.eval.init_params.camera_heights x camera_widths = 64x48 is smaller"),
    ("train", ["maniskill_ppo_tiny", "actor.model.use_proprio=true"], "actor.model.proprio_dim=8 (use_proprio) but env.train gives a 12-d state; set actor.model.proprio_dim=12"),
    # integer ranges, empty names and paths, run names that would leave runner.output_dir
    ("train", ["runner.seed=-1"], "runner.seed: must be >= 0, got -1"),
    ("train", ["env.eval.seed=-5"], "env.eval.seed: must be >= 0, got -5"),
    ("train", ["actor.seed=-2"], "actor.seed: must be >= 0, got -2"),
    ("train", ["actor.model.lora_alpha=0"], "actor.model.lora_alpha: must be >= 1"),
    ("train", ['runner.experiment_name=""'], "runner.experiment_name is empty"),
    ("print-config", ['actor.model.model_path=""'], "actor.model.model_path is empty"),
    ("train", ['rollout.channel.queue_name=""'], "rollout.channel.queue_name is empty"),
    ("train", ["runner.experiment_name=../escaped"],
     "runner.experiment_name='../escaped' names a directory outside runner.output_dir (a path, not a name); use a plain name such as runner.experiment_name=escaped"),
    ("print-config", ["runner.experiment_name=/tmp/elsewhere"], "runner.experiment_name='/tmp/elsewhere' names a directory outside runner.output_dir"),
    ("train", ["runner.experiment_name=a/b"], "runner.experiment_name='a/b' names a directory outside runner.output_dir"),
    ("train", ["no_such_experiment"], "unknown experiment config 'no_such_experiment'"),
    ("train", ["libero_grpo_tiny", "env.train.total_num_envs=3"], "env.train.total_num_envs=3 must be a multiple"),
    ("train", ["maniskill_grpo_tiny", "env.train.total_num_envs=6"], "env.train.group_size=2 must divide the 3 sub-envs"),
]

# Runs every case through the real CLI entry in this fresh interpreter and reports what it saw.
DRIVER = r"""
import contextlib, io, json, sys, traceback
import psutil
from embodied_rl import cli
out = []
for command, args in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = cli.main([command, *args])
        except BaseException:
            code, err = "raised", io.StringIO(traceback.format_exc())
    out.append({"code": code, "stderr": err.getvalue(),
                "ray_initialized": "ray" in sys.modules and sys.modules["ray"].is_initialized(),
                "children": [" ".join(p.cmdline()[:2]) for p in psutil.Process().children(recursive=True)]})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    cwd = tmp_path_factory.mktemp("badcfg")
    from embodied_rl.cli.make_model import make_model_main

    assert make_model_main(["tiny", str(cwd / EXISTING_56PX), "--image-size", "56"]) == 0
    cases = [(cmd, [*args, f"runner.output_dir={cwd}/runs/{i}"]) for i, (cmd, args, _) in enumerate(CASES)]
    return cwd, _drive(cases, cwd)


def _drive(cases: list[tuple[str, list[str]]], cwd: Path, prelude: str = "") -> list[dict]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, "-c", prelude + DRIVER, json.dumps(cases)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_catalogue_is_large_enough() -> None:
    assert len(CASES) >= 30
    assert len({(c, tuple(a)) for c, a, _ in CASES}) == len(CASES)


@pytest.mark.parametrize("index", range(len(CASES)), ids=[" ".join(a) for _, a, _ in CASES])
def test_bad_config_is_one_line_exit_2_and_leaves_no_trace(outcomes: tuple[Path, list[dict]], index: int) -> None:
    cwd, results = outcomes
    _, _, expected = CASES[index]
    got = results[index]
    lines = got["stderr"].strip().splitlines()
    assert got["code"] == 2, got["stderr"][-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), got["stderr"][-3000:]
    assert "Traceback" not in got["stderr"]
    assert expected in lines[0], lines[0]
    assert not got["ray_initialized"], "Ray was initialised"
    assert got["children"] == [], f"processes were started: {got['children']}"
    assert not (cwd / "runs" / str(index)).exists(), "a run directory was created"
    assert not (cwd / "models").exists() and not (cwd / "nowhere").exists(), "a model file was created"


def test_vllm_backend_without_vllm_names_the_set_up_flag(tmp_path: Path) -> None:
    """As on a machine set up without --vllm: the interpreter is told vllm does not exist
    (sys.modules[name] = None makes importlib's find_spec return None, as for a missing package)."""
    got = _drive([("train", ["rollout.backend=vllm", f"runner.output_dir={tmp_path}/runs"])], tmp_path,
                 prelude="import sys; sys.modules['vllm'] = None\n")[0]
    lines = got["stderr"].strip().splitlines()
    assert got["code"] == 2 and len(lines) == 1, got["stderr"][-3000:]
    assert lines[0].startswith("error: rollout.backend=vllm needs vllm, which is not installed: run `bash scripts/setup.sh --vllm`"), lines[0]
    assert "pip install '.[vllm]'" in lines[0]
    assert not got["ray_initialized"] and got["children"] == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [["env.train.total_num_envs=3"], ["cluster.component_placement=actor", "cluster.component_placement=env"]])
def test_installed_command_exits_2_with_one_line(tmp_path: Path, args: list[str]) -> None:
    exe = Path(sys.executable).with_name("embodied-rl")
    proc = subprocess.run([str(exe), "train", *args], cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("error: ")
    assert list(tmp_path.iterdir()) == []
