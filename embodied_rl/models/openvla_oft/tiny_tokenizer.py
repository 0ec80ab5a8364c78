"""Offline Llama-style tokenizer for the tiny preset, built with the `tokenizers` library.

Conventions kept from Llama-2 so the same code path serves real checkpoints:
<unk>=0, <s>=1 (BOS, added in front), </s>=2, a standalone '▁' token (the "empty" token
OFT appends to prompts), Metaspace word boundaries, and the last 256 ids of the *base*
vocabulary reserved for action bins (so `tokenizer.vocab_size` counts them, as the action
tokenizer requires), plus '<PAD>' added right after the base vocabulary.
"""
from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

SPECIALS = ["<unk>", "<s>", "</s>"]
PAD_TOKEN = "<PAD>"
# Words of the OFT prompt and of ManiSkill / LIBERO instructions: the BPE merges learn them.
_CORPUS = """In: What action should the robot take to {}?
Out:
pick up the red cube and place it on the green target put the bowl on the plate on top of the
cabinet open the top drawer close the microwave turn on the stove push the block to the goal
move the object into the basket stack the cube lift the peg insert it into the hole alphabet soup
cream cheese tomato sauce ketchup orange juice milk butter chocolate pudding wine bottle rack
black bowl between plate ramekin next to cookie box wooden tray mug left right front back middle
""".replace("{}", "pick up the cube")
_ALPHABET = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,:;!?'\"-_()/\n")


def build_tiny_tokenizer(base_vocab_size: int = 512, n_action_bins: int = 256) -> PreTrainedTokenizerFast:
    text_vocab = base_vocab_size - n_action_bins
    if text_vocab < 128:
        raise ValueError(f"base_vocab_size={base_vocab_size} leaves {text_vocab} text tokens; need >= 128 besides {n_action_bins} action bins")
    trainer = trainers.BpeTrainer(
        vocab_size=text_vocab, special_tokens=SPECIALS + ["▁"], initial_alphabet=_ALPHABET, show_progress=False
    )
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    bpe.train_from_iterator(_CORPUS.splitlines(), trainer=trainer)
    vocab = bpe.get_vocab()
    # Pad the text part to exactly text_vocab ids, then append the action-bin tokens.
    for i in range(len(vocab), text_vocab):
        vocab[f"<filler_{i}>"] = i
    for i in range(n_action_bins):
        vocab[f"<action_{i}>"] = text_vocab + i
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in _merges(bpe)]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    tok.add_special_tokens(SPECIALS)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", padding_side="left"
    )
    fast.add_special_tokens({"pad_token": PAD_TOKEN})
    assert fast.convert_tokens_to_ids(PAD_TOKEN) == base_vocab_size, "PAD must follow the base vocabulary"
    return fast


def _merges(bpe: Tokenizer) -> list:
    import json

    return json.loads(bpe.to_str())["model"]["merges"]
