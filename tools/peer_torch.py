"""PyTorch eager reference for docs/performance.md at configs/peer.py's shape: nanoGPT (Pre-LN, learned positions,
tanh GELU, no biases, AdamW, 2 threads) and the same model with dynamic Hyper-Connections (n = 4, Zhu et al. 2024).

Not part of resnorm (torch is not a dependency): run it from a separate environment,
  python -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch==2.13.0
  /tmp/torchenv/bin/python tools/peer_torch.py [--hc] [--steps N]
right before or after `python -m resnorm.bench --config=configs/peer.py --residuals=pre_norm,hc` (this machine's
speed drifts; compare runs taken minutes apart)."""
import argparse, statistics, time
import torch, torch.nn as nn, torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--hc", action="store_true"); p.add_argument("--steps", type=int, default=10)
p.add_argument("--d", type=int, default=128); p.add_argument("--layers", type=int, default=12)
a = p.parse_args()
torch.set_num_threads(2)
D, L, H, T, B, V, N = a.d, a.layers, 4, 128, 16, 256, 4

class Attn(nn.Module):
  def __init__(s):
    super().__init__(); s.qkv = nn.Linear(D, 3 * D, bias=False); s.o = nn.Linear(D, D, bias=False)
  def forward(s, x):
    q, k, v = s.qkv(x).split(D, dim=2)
    q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return s.o(y.transpose(1, 2).contiguous().view(B, T, D))

class MLP(nn.Module):
  def __init__(s):
    super().__init__(); s.fc = nn.Linear(D, 4 * D, bias=False); s.proj = nn.Linear(4 * D, D, bias=False)
  def forward(s, x): return s.proj(F.gelu(s.fc(x), approximate="tanh"))

class HC(nn.Module):
  """Dynamic hyper-connection (Zhu et al. 2024) around one sublayer: h [B,T,N,D] -> h'."""
  def __init__(s, f, k):
    super().__init__(); s.f = f; s.norm = nn.LayerNorm(D)
    am = torch.zeros(N, N + 1); am[k % N, 0] = 1; am[:, 1:] = torch.eye(N)
    s.static_alpha = nn.Parameter(am); s.static_beta = nn.Parameter(torch.ones(N))
    s.dyn_alpha = nn.Parameter(torch.zeros(D, N + 1)); s.dyn_beta = nn.Parameter(torch.zeros(D))
    s.s_alpha = nn.Parameter(torch.tensor(0.01)); s.s_beta = nn.Parameter(torch.tensor(0.01))
  def forward(s, h):
    hn = s.norm(h)
    alpha = s.s_alpha * torch.tanh(hn @ s.dyn_alpha) + s.static_alpha          # [B,T,N,N+1]
    beta = s.s_beta * torch.tanh(hn @ s.dyn_beta) + s.static_beta              # [B,T,N]
    mix = torch.einsum("btnm,btnd->btmd", alpha, h)                            # [B,T,N+1,D]
    y = s.f(mix[:, :, 0])
    return mix[:, :, 1:] + beta.unsqueeze(-1) * y.unsqueeze(2)

class Block(nn.Module):
  def __init__(s, i):
    super().__init__(); s.ln1, s.ln2, s.attn, s.mlp = nn.LayerNorm(D), nn.LayerNorm(D), Attn(), MLP()
    if a.hc: s.hc1, s.hc2 = HC(nn.Sequential(s.ln1, s.attn), 2 * i), HC(nn.Sequential(s.ln2, s.mlp), 2 * i + 1)
  def forward(s, x):
    if a.hc: return s.hc2(s.hc1(x))
    x = x + s.attn(s.ln1(x)); return x + s.mlp(s.ln2(x))

class GPT(nn.Module):
  def __init__(s):
    super().__init__(); s.wte = nn.Embedding(V, D); s.wpe = nn.Embedding(T, D)
    s.blocks = nn.ModuleList(Block(i) for i in range(L)); s.lnf = nn.LayerNorm(D); s.head = nn.Linear(D, V, bias=False)
  def forward(s, idx, tgt):
    x = s.wte(idx) + s.wpe(torch.arange(T))
    if a.hc: x = x.unsqueeze(2).expand(B, T, N, D).contiguous()
    for b in s.blocks: x = b(x)
    if a.hc: x = x.sum(2)
    return F.cross_entropy(s.head(s.lnf(x)).view(-1, V), tgt.view(-1))

torch.manual_seed(0)
m = GPT(); opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01)
x = torch.randint(0, V, (B, T)); y = torch.randint(0, V, (B, T))
ts = []
for i in range(a.steps + 2):
  t = time.perf_counter()
  loss = m(x, y); opt.zero_grad(set_to_none=True); loss.backward(); opt.step(); loss.item()
  if i >= 2: ts.append(time.perf_counter() - t)
med = statistics.median(ts)
print(f"torch {'hc' if a.hc else 'pre_norm'} D={D} L={L}: {med*1e3:.1f} ms/step, {B*T/med:.0f} tokens/s, "
      f"params {sum(q.numel() for q in m.parameters())/1e6:.2f}M")
