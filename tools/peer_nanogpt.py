"""The peers' own code at configs/peer.py's shape, for docs/performance.md: karpathy/nanoGPT's `model.py` (GPT with
Pre-LN blocks, learned positions, tied embedding, exact GELU, no biases), trained as nanoGPT's `train.py` trains it
(its `configure_optimizers` AdamW, global-norm clipping at 1.0, 2 CPU threads), and the same blocks wrapped in
lucidrains' `hyper-connections` package: Hyper-Connections (Zhu et al. 2024, arXiv:2409.19606) and mHC (Xie et al.
2025, arXiv:2512.24880), 4 streams, as that package's README wraps a branch.

Nothing of either peer is copied here. nanoGPT is imported from a checkout given on the command line; torch and
hyper-connections are not resnorm dependencies and run from a separate environment:
  python -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch==2.14.1 hyper-connections==0.4.11
  (a checkout of the public karpathy/nanoGPT repository in /tmp/nanoGPT; only its model.py is used)
  /tmp/torchenv/bin/python tools/peer_nanogpt.py --nanogpt=/tmp/nanoGPT --residuals=pre_norm,hc,mhc
Every residual in --residuals is built in this one process and their steps are interleaved (A B C A B C ...), as
`python -m resnorm.bench` does. This machine's speed drifts: compare with `python -m resnorm.bench
--config=configs/peer.py` runs taken minutes apart, alternated (tools/peer_ab.sh does both).
"""
import argparse
import importlib.util
import json
import os
import statistics
import sys
import time

RESIDUALS = ("pre_norm", "hc", "mhc")


def fail(msg: str):
  print(f"error: {msg}", file=sys.stderr)
  sys.exit(2)


def parse(argv):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--nanogpt", default=None, help="a checkout of karpathy/nanoGPT (the folder holding model.py)")
  p.add_argument("--residuals", default="pre_norm", help="comma-separated, of: " + ", ".join(RESIDUALS))
  p.add_argument("--hc", action="store_true", help="shorthand for --residuals=hc")
  p.add_argument("--mhc", action="store_true", help="shorthand for --residuals=mhc")
  p.add_argument("--steps", type=int, default=10, help="timed steps per residual")
  p.add_argument("--warmup", type=int, default=2, help="untimed steps per residual")
  p.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
  p.add_argument("--vocab", type=int, default=256, help="vocabulary (resnorm's config pads 256 bytes + 2 to 320)")
  p.add_argument("--json", default=None, help="write the results here")
  a = p.parse_args(argv)
  names = [r for r in a.residuals.split(",") if r]
  if a.hc or a.mhc:
    names = (["hc"] if a.hc else []) + (["mhc"] if a.mhc else [])
  for r in names:
    if r not in RESIDUALS:
      fail(f"--residuals: {r!r} is unknown; known: {', '.join(RESIDUALS)}")
  if not names:
    fail("--residuals is empty")
  if a.steps < 1 or a.warmup < 0 or a.threads < 1:
    fail("--steps and --threads must be >= 1, --warmup >= 0")
  if not a.nanogpt:
    fail("--nanogpt is required: a checkout of karpathy/nanoGPT (the folder holding model.py)")
  if not os.path.isfile(os.path.join(a.nanogpt, "model.py")):
    fail(f"--nanogpt={a.nanogpt}: no model.py there (give a checkout of karpathy/nanoGPT)")
  a.names = names
  return a


# configs/peer.py's shape
D, L, HEADS, T, B, STREAMS = 128, 12, 4, 128, 16, 4


def load_nanogpt(path: str):
  spec = importlib.util.spec_from_file_location("nanogpt_model", os.path.join(path, "model.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def build(ng, residual: str, vocab: int):
  import torch
  from torch import nn
  torch.manual_seed(0)
  cfg = ng.GPTConfig(block_size=T, vocab_size=vocab, n_layer=L, n_head=HEADS, n_embd=D, dropout=0.0, bias=False)
  model = ng.GPT(cfg)
  if residual != "pre_norm":
    import hyper_connections as hcpkg
    make = (hcpkg.get_init_and_expand_reduce_stream_functions if residual == "hc"
            else hcpkg.mc_get_init_and_expand_reduce_stream_functions)
    init_hc, expand, reduce = make(STREAMS)
    tr = model.transformer
    for i, blk in enumerate(tr.h):
      # nanoGPT's block is x + attn(ln_1(x)), x + mlp(ln_2(x)): each pre-normed sublayer is one branch; sublayer k
      # starts from stream k mod n, as resnorm's HC/mHC init does
      blk.hc_attn = init_hc(dim=D, branch=nn.Sequential(blk.ln_1, blk.attn), layer_index=2 * i)
      blk.hc_mlp = init_hc(dim=D, branch=nn.Sequential(blk.ln_2, blk.mlp), layer_index=2 * i + 1)
      blk.forward = (lambda h1, h2: lambda x: h2(h1(x)))(blk.hc_attn, blk.hc_mlp)
    # nanoGPT's own GPT.forward runs unchanged: the streams are expanded after the embedding dropout and summed
    # before the final norm (the package README's steps 2 and 4)
    tr.drop = nn.Sequential(tr.drop, expand)
    tr.ln_f = nn.Sequential(reduce, tr.ln_f)
  model.train()
  # nanoGPT's optimizer (decay on >= 2-D tensors; fused only on CUDA), resnorm's peer hyper-parameters
  opt = model.configure_optimizers(weight_decay=0.01, learning_rate=1e-3, betas=(0.9, 0.98), device_type="cpu")
  return model, opt


def main(argv=None):
  a = parse(sys.argv[1:] if argv is None else argv)
  try:
    import torch
  except ImportError:
    fail("torch is not installed here: run this with a separate environment's python (see the module docstring)")
  if any(r != "pre_norm" for r in a.names) and importlib.util.find_spec("hyper_connections") is None:
    fail("hc/mhc need lucidrains' package: pip install hyper-connections (into the torch environment)")
  torch.set_num_threads(a.threads)
  ng = load_nanogpt(a.nanogpt)
  g = torch.Generator().manual_seed(0)
  x = torch.randint(0, a.vocab, (B, T), generator=g)
  y = torch.randint(0, a.vocab, (B, T), generator=g)
  points = []
  for r in a.names:
    model, opt = build(ng, r, a.vocab)
    points.append({"residual": r, "model": model, "opt": opt, "times": [],
                   "params": sum(p.numel() for p in model.parameters())})

  def step(pt):
    # nanoGPT train.py's step: forward, backward, clip, AdamW, zero_grad(set_to_none)
    t0 = time.perf_counter()
    _, loss = pt["model"](x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(pt["model"].parameters(), 1.0)
    pt["opt"].step()
    pt["opt"].zero_grad(set_to_none=True)
    pt["loss"] = loss.item()
    return time.perf_counter() - t0

  for pt in points:
    for _ in range(a.warmup):
      step(pt)
  for _ in range(a.steps):  # interleaved: A B C A B C ...
    for pt in points:
      pt["times"].append(step(pt))
  rows = []
  for pt in points:
    med = statistics.median(pt["times"])
    rows.append({"residual": pt["residual"], "step_s_median": med, "step_s_min": min(pt["times"]),
                 "step_s_max": max(pt["times"]), "tokens_per_s": B * T / med, "params": pt["params"],
                 "loss": pt["loss"]})
    print(f"nanoGPT {pt['residual']:<9} {med * 1e3:8.1f} ms/step (min {min(pt['times']) * 1e3:.1f}, max "
          f"{max(pt['times']) * 1e3:.1f}), {B * T / med:,.0f} tokens/s, params {pt['params'] / 1e6:.3f}M, "
          f"loss {pt['loss']:.3f}")
  if a.json:
    with open(a.json, "w") as f:
      json.dump({"torch": torch.__version__, "threads": a.threads, "vocab": a.vocab, "runs": rows}, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
