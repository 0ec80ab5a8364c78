"""Outside the OpenVLA-OFT policy, no module knows how a policy encodes its actions: no action
tokens, bins or top-k. The runtime, algorithms and configs speak of actions, action records and
log-prob entries; a discretising policy's vocabulary stays in embodied_rl/models/openvla_oft/."""
from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "embodied_rl"
OWN_VOCABULARY = PACKAGE / "models" / "openvla_oft"

# Word-ish: `token`/`tokens` as a word or a snake_case part (token_level, num_tokens), not inside
# another word (tokenizer: the checkpoint's text tokenizer file); `bin`/`bins` not as a path part
# (.venv/bin); top-k in any spelling.
FORBIDDEN = re.compile(r"(?<![a-z])tokens?(?![a-z])|(?<![\w/.])bins?(?![\w/])|top[_-]?k", re.IGNORECASE)

#: Allowed mentions: the config values that follow RLinf's published names, and the old keys
#: the loader names to refuse them (config/typecheck.py REPLACED_KEYS).
ALLOWED = re.compile(
    r"token_level|seq-mean-token-sum-norm|seq-mean-token-sum|seq-mean-token-mean|token-mean"
    r"|algorithm\.sampling_params\.top_k|actor\.model\.top_k"
)


def offending_lines() -> list[str]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if OWN_VOCABULARY in path.parents:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if FORBIDDEN.search(ALLOWED.sub("", line)):
                out.append(f"{path.relative_to(PACKAGE.parent)}:{n}: {line.strip()[:160]}")
    return out


def test_no_module_outside_the_oft_policy_speaks_of_tokens_bins_or_top_k() -> None:
    found = offending_lines()
    assert not found, "action-encoding vocabulary outside models/openvla_oft/:\n" + "\n".join(found)


def test_the_pattern_catches_what_it_is_meant_to() -> None:
    for line in ("num_tokens = 3", "group_tokens(x)", "256 bins", "one action bin", "top_k=3", "top-k", "topk",
                 "valid_token_fraction"):
        assert FORBIDDEN.search(ALLOWED.sub("", line)), line
    for line in ("tokenizer.json", ".venv/bin/embodied-rl", "logprob_type: token_level", "loss_agg_func=token-mean",
                 "seq-mean-token-sum-norm", "combine", "binary"):
        assert not FORBIDDEN.search(ALLOWED.sub("", line)), line
