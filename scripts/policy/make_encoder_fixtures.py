#!/usr/bin/env python3
"""Writes the sentence-encoder fixtures that crates/policy/tests/it/encoder.rs reads.

The Vendi score's `sentence` kernel embeds environment code with a BERT-family encoder loaded
from a local directory (the Vendi authors embed text with unsup-SimCSE RoBERTa-base, taking the
pooler output: vendi_score/text_utils.py `get_embeddings`). Each case here is a random small
model of that family (transformers' RobertaModel or BertModel, float32) saved with
`save_pretrained`, a tokenizer trained on a few lines and saved so AutoTokenizer loads it, and
expected.json: texts, their token ids (special tokens added, truncated to 512 as the Vendi code
does) and the pooled embedding of each text alone (pooler output; the [CLS] hidden state for the
case without a pooler).

Needs torch and transformers (see make_fixtures.py for the venv). Deterministic given the seeds.
    ~/.cache/spade-studio/venv-torch/bin/python scripts/policy/make_encoder_fixtures.py
"""

import json
import shutil
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import BertConfig, BertModel, PreTrainedTokenizerFast, RobertaConfig, RobertaModel

OUT = Path(__file__).resolve().parents[2] / "crates/policy/tests/fixtures"
CORPUS = [
    "class GuessEnv:\n    def reset(self, seed=None):\n        return 'Guess a number', {}\n",
    "def step(self, action):\n    return obs, 1.0, True, False, {}",
    "The agent answers in \\boxed{42}; the last boxed expression is the action.",
] * 20
TEXTS = [
    "class CoinEnv:\n    def reset(self, seed=None):\n        self.rng = random.Random(seed)\n",
    "def solution(self):\n    return str(self.secret)",
    "word " * 700,  # longer than 512 tokens: truncated, the last special token kept
]


def roberta_tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")),
                                                      ("<s>", tok.token_to_id("<s>")))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   sep_token="</s>", cls_token="<s>", unk_token="<unk>",
                                   pad_token="<pad>", mask_token="<mask>")
    return fast


def bert_tokenizer():
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=300, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                   ("[CLS]", tok.token_to_id("[CLS]")))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", sep_token="[SEP]",
                                   pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]")


def make_case(name, seed, model_cls, cfg_cls, tokenizer, overrides, pooler):
    torch.manual_seed(seed)
    tok = tokenizer()
    cfg = cfg_cls(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=600, pad_token_id=tok.pad_token_id,
                  **overrides)
    model = model_cls(cfg, add_pooling_layer=pooler).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "LayerNorm.weight" in n:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape))
            else:
                p.copy_(0.2 * torch.randn(p.shape))
    out = OUT / name
    shutil.rmtree(out, ignore_errors=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    cases = []
    with torch.no_grad():
        for text in TEXTS:
            enc = tok(text, return_tensors="pt", truncation=True, max_length=512)
            o = model(**enc)
            vec = o.pooler_output if pooler else o.last_hidden_state[:, 0]
            cases.append(dict(text=text, ids=enc["input_ids"][0].tolist(), embedding=vec[0].tolist()))
    (out / "expected.json").write_text(json.dumps(dict(pooling="pooler" if pooler else "cls", cases=cases)) + "\n")
    size = sum(f.stat().st_size for f in out.iterdir())
    assert size < 1_000_000, f"{name} is {size} bytes"
    print(f"{name}: {size // 1024} KiB, {sorted(f.name for f in out.iterdir())}")


def main() -> int:
    torch.set_num_threads(1)
    make_case("encoder_roberta_pooler", 21, RobertaModel, RobertaConfig, roberta_tokenizer,
              dict(type_vocab_size=1, layer_norm_eps=1e-5), pooler=True)
    make_case("encoder_bert_cls", 22, BertModel, BertConfig, bert_tokenizer,
              dict(type_vocab_size=2, layer_norm_eps=1e-12, hidden_act="gelu"), pooler=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
