"""Run a real-writer generator (HF Trainer + accelerate FSDP2, or HF
Trainer + DeepSpeed ZeRO-3) on a bigger Llama, for bench/hf_trainer.sh.

    launch.sh 2 PORT python3 gen_hf_big.py GENERATOR.py ARGS...

GENERATOR.py is one of the real-writer fixture generators (hf_fsdp.py,
hf_deepspeed.py in tests/fixtures/real-writers/gen/): they build a tiny
LlamaForCausalLM and train it 4 steps, saving every 2. This wrapper runs
the generator unchanged but for two things, patched into the classes
before it runs: LlamaConfig gets the sizes below (267M parameters, 1.07
GB of float32 weights, untied embeddings: zero_to_fp32's
--safe_serialization fails on tied ones), and TrainingArguments trains
one step and saves it (checkpoint-1/), so the data is written once.
Rank 0 then writes the model's config.json beside checkpoint-1/ (the
FSDP Trainer saves none in the step; ckpt is given it with
--config-dir). Runs where the generator does (torch 2.14, transformers
5.12, accelerate 1.14, DeepSpeed 0.19.6).
"""
import os
import runpy
import sys

import transformers

SIZES = dict(vocab_size=32000, hidden_size=1024, intermediate_size=4096,
             num_hidden_layers=12, num_attention_heads=16,
             num_key_value_heads=16, max_position_embeddings=256,
             tie_word_embeddings=False)

# On the classes, not the module's names: importing DeepSpeed replaces
# sys.modules["transformers"], which the generator then imports from.
_config = transformers.LlamaConfig.__init__
_args = transformers.TrainingArguments.__init__
made = []


def big_config(self, *a, **kw):
    kw.update(SIZES)
    _config(self, *a, **kw)
    made.append(self)


def one_step(self, *a, **kw):
    kw.update(max_steps=1, save_steps=1)
    _args(self, *a, **kw)


transformers.LlamaConfig.__init__ = big_config
transformers.TrainingArguments.__init__ = one_step
gen = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(gen, run_name="__main__")
if os.environ.get("RANK", "0") == "0":
    made[0].save_pretrained(sys.argv[-1])
