#!/usr/bin/python3
"""Trains swarmflow's small language model and writes it as one file.

Text: "The Devil's Dictionary" by Ambrose Bierce (1911), public domain
("A Public Domain Text, Copyright Expired", /usr/share/doc/dict-devil/copyright),
read from the Debian package `dict-devil`, file /usr/share/dictd/devil.dict.dz.
Nothing is downloaded.

Model: a llama-style decoder-only transformer (RMSNorm, rotary embeddings on
interleaved pairs, SwiGLU, tied embeddings) over a byte-level tokenizer
(ids 0..255 are bytes, 256 is BOS). The file format is described in docs/lm.md
and read by actors/lm/model.cpp.

Run with Debian's python3-torch (system /usr/bin/python3):
    /usr/bin/python3 scripts/train_lm.py                 # models/devil-1m.sflm (float32)
    /usr/bin/python3 scripts/train_lm.py --config 8m     # models/devil-8m.sflm (float16)
It is seeded; with the same torch version and thread count it writes the same bytes.
--save-state keeps the trained weights (torch.save) so that --load-state can write
the files again without training.
"""
import argparse
import gzip
import math
import struct
import sys
import time
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F

TEXT_FILE = "/usr/share/dictd/devil.dict.dz"  # Debian package dict-devil
MAGIC = b"SFLM"
VERSION = 1           # float32 weights
VERSION_F16 = 2       # the same layout; flags bit 1: weights stored as IEEE float16
FLAG_TIED = 1
FLAG_F16 = 2
BOS = 256
VOCAB = 257

# Model shapes: the 0.9 M-parameter model whose weights fit in a CPU's cache, and an
# 8 M-parameter one whose float32 weights (32.3 MB) do not fit in a 32 MB L3, most
# of them in the feed-forward (see docs/lm.md).
# conv: run the matrix products as 1x1 convolutions (see dense()).
CONFIGS = {
    "1m": dict(dim=128, layers=4, heads=4, hidden=384, max_len=512, theta=10000.0, eps=1e-5,
               out="models/devil-1m.sflm", reference="tests/data/lm_reference.bin",
               dtype="float32", steps=400, lr=3e-3, batch=16, context=96, threads=1, conv=False),
    "8m": dict(dim=384, layers=4, heads=6, hidden=1216, max_len=512, theta=10000.0, eps=1e-5,
               out="models/devil-8m.sflm", reference="tests/data/lm_reference_8m.bin",
               dtype="float16", steps=180, lr=3e-3, batch=16, context=96, threads=2, conv=True),
}

REFERENCE_PROMPTS = [
    "DICTIONARY, n.",
    "LAWYER, n.  One skilled in",
    "The Devil's",
    "\nCAT, n.  A soft, indestructible",
]


def read_text():
    """The dictionary's text, without the dictfmt database entries."""
    raw = gzip.open(TEXT_FILE).read().decode("utf-8")
    start = raw.index("PREFACE")
    text = raw[start:]
    # dictfmt keeps each entry as written; normalise line ends and tabs.
    text = text.replace("\r\n", "\n").replace("\t", "    ")
    return text.encode("ascii", "replace")


# Debian 12's torch calls the reference (netlib) BLAS for matrix products, about
# 5 GFLOP/s here; its oneDNN convolution runs the same product as a 1x1
# convolution at about 250. The larger model trains that way; the small one's
# products stay as they were, so that its file is reproduced as it was.
CONV_PRODUCTS = False


def dense(x, w):
    """x @ w.T over the last dimension of x."""
    if not CONV_PRODUCTS:
        return F.linear(x, w)
    lead = x.shape[:-1]
    y = F.conv1d(x.reshape(1, -1, x.shape[-1]).transpose(1, 2), w.unsqueeze(-1))
    return y.transpose(1, 2).reshape(*lead, w.shape[0])


class Linear(nn.Linear):
    """nn.Linear without bias whose product is dense()'s."""
    def __init__(self, n_in, n_out):
        super().__init__(n_in, n_out, bias=False)

    def forward(self, x):
        return dense(x, self.weight)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(head_dim, max_len, theta, dtype):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    ang = torch.outer(torch.arange(max_len, dtype=torch.float64), inv)
    return torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)


def apply_rope(x, cos, sin):
    # x: [B, T, H, D]; rotate pairs (2i, 2i+1).
    x0 = x[..., 0::2]
    x1 = x[..., 1::2]
    c = cos[None, :, None, :]
    s = sin[None, :, None, :]
    out = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
    return out.flatten(-2)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, h = cfg["dim"], cfg["hidden"]
        self.n_heads = cfg["heads"]
        self.attn_norm = RMSNorm(d, cfg["eps"])
        self.wq = Linear(d, d)
        self.wk = Linear(d, d)
        self.wv = Linear(d, d)
        self.wo = Linear(d, d)
        self.ffn_norm = RMSNorm(d, cfg["eps"])
        self.w1 = Linear(d, h)
        self.w2 = Linear(h, d)
        self.w3 = Linear(d, h)

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        hd = d // self.n_heads
        y = self.attn_norm(x)
        q = apply_rope(self.wq(y).view(b, t, self.n_heads, hd), cos, sin)
        k = apply_rope(self.wk(y).view(b, t, self.n_heads, hd), cos, sin)
        v = self.wv(y).view(b, t, self.n_heads, hd)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        o = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.wo(o)
        y = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(y)) * self.w3(y))


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(VOCAB, cfg["dim"])
        nn.init.normal_(self.embed.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg["layers"]))
        self.norm = RMSNorm(cfg["dim"], cfg["eps"])

    def forward(self, idx):
        t = idx.shape[1]
        hd = self.cfg["dim"] // self.cfg["heads"]
        cos, sin = rope_tables(hd, t, self.cfg["theta"], self.embed.weight.dtype)
        x = self.embed(idx)
        for blk in self.blocks:
            x = blk(x, cos, sin)
        if CONV_PRODUCTS:
            return dense(self.norm(x), self.embed.weight)
        return self.norm(x) @ self.embed.weight.t()


def stored(t, dtype):
    """A tensor as it is stored in the file: float32, or float16 rounded to nearest even."""
    return t.detach().to(torch.float16 if dtype == "float16" else torch.float32).contiguous()


def write_model(path, model, dtype):
    cfg = model.cfg
    f16 = dtype == "float16"
    header = struct.pack("<4sI", MAGIC, VERSION_F16 if f16 else VERSION)
    # dim, layers, heads, kv_heads, hidden, vocab, max_seq_len, flags(bit0 tied), bos
    params = struct.pack("<9I2f", cfg["dim"], cfg["layers"], cfg["heads"], cfg["heads"],
                         cfg["hidden"], VOCAB, cfg["max_len"],
                         FLAG_TIED | (FLAG_F16 if f16 else 0), BOS, cfg["theta"], cfg["eps"])
    tok = bytearray()
    for i in range(VOCAB):
        piece = bytes([i]) if i < 256 else b""
        tok += struct.pack("<I", len(piece)) + piece
    tensors = [model.embed.weight]
    for blk in model.blocks:
        tensors += [blk.attn_norm.weight, blk.wq.weight, blk.wk.weight, blk.wv.weight, blk.wo.weight,
                    blk.ffn_norm.weight, blk.w1.weight, blk.w2.weight, blk.w3.weight]
    tensors.append(model.norm.weight)
    data = b"".join(stored(t, dtype).numpy().tobytes() for t in tensors)
    body = params + struct.pack("<I", len(tok)) + bytes(tok) + struct.pack("<Q", len(data)) + data
    payload = header + body
    with open(path, "wb") as f:
        f.write(payload + struct.pack("<I", zlib.crc32(payload) & 0xFFFFFFFF))
    return len(payload) + 4


def write_reference(path, model, dtype):
    """Logits at every position of each fixed prompt, computed in float64 from the
    weights as the file stores them (float16-rounded for a float16 file)."""
    global CONV_PRODUCTS
    CONV_PRODUCTS = False  # the reference is plain float64 products
    ref = Model(model.cfg).double()
    ref.load_state_dict({k: stored(v, dtype).double() for k, v in model.state_dict().items()})
    out = bytearray(struct.pack("<4sII", b"SFLR", len(REFERENCE_PROMPTS), VOCAB))
    with torch.no_grad():
        for p in REFERENCE_PROMPTS:
            ids = [BOS] + list(p.encode("ascii"))
            logits = ref(torch.tensor([ids]))[0].to(torch.float32)
            pb = p.encode("ascii")
            out += struct.pack("<I", len(pb)) + pb + struct.pack("<I", len(ids))
            out += struct.pack("<%di" % len(ids), *ids)
            out += logits.contiguous().numpy().tobytes()
    with open(path, "wb") as f:
        f.write(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", choices=sorted(CONFIGS), default="1m")
    ap.add_argument("--out", help="model file (default: the config's)")
    ap.add_argument("--reference", help="reference logits file (default: the config's)")
    ap.add_argument("--dtype", choices=["float32", "float16"], help="weight storage (default: the config's)")
    ap.add_argument("--steps", type=int, help="training steps (default: the config's)")
    ap.add_argument("--batch", type=int, help="sequences per step (default: the config's)")
    ap.add_argument("--context", type=int, help="bytes per sequence (default: the config's)")
    ap.add_argument("--lr", type=float, help="peak learning rate (default: the config's)")
    ap.add_argument("--threads", type=int, help="torch threads (default: the config's)")
    ap.add_argument("--seed", type=int, default=1911)
    ap.add_argument("--save-state", help="also save the trained weights here (torch.save)")
    ap.add_argument("--load-state", help="write the files from weights saved by --save-state; no training")
    args = ap.parse_args()
    conf = dict(CONFIGS[args.config])
    global CONV_PRODUCTS
    CONV_PRODUCTS = conf.pop("conv")
    for key in ("out", "reference", "dtype", "steps", "lr", "batch", "context", "threads"):
        if getattr(args, key) is None:
            setattr(args, key, conf[key])
        del conf[key]
    if args.steps < 1 and not args.load_state:
        ap.error("--steps must be at least 1")

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    cfg = conf

    text = read_text()
    data = torch.tensor(list(text), dtype=torch.long)
    split = int(len(data) * 0.95)
    train, val = data[:split], data[split:]
    print(f"text: {len(text)} bytes from {TEXT_FILE}", flush=True)

    model = Model(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters: {n_params}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(args.seed)

    def batch(src):
        ix = torch.randint(len(src) - args.context - 1, (args.batch,), generator=gen)
        x = torch.stack([src[i:i + args.context] for i in ix])
        y = torch.stack([src[i + 1:i + 1 + args.context] for i in ix])
        return x, y

    t0 = time.time()
    if args.load_state:
        model.load_state_dict(torch.load(args.load_state))
        args.steps = -1
    warm = max(1, min(100, args.steps // 10))
    for step in range(args.steps + 1):
        lr = args.lr * min(1.0, (step + 1) / warm) * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batch(train)
        loss = F.cross_entropy(model(x).view(-1, VOCAB), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 100 == 0 or step == args.steps:
            with torch.no_grad():
                vx, vy = batch(val)
                vloss = F.cross_entropy(model(vx).view(-1, VOCAB), vy.view(-1)).item()
            print(f"step {step} loss {loss.item():.3f} val {vloss:.3f} ({time.time() - t0:.0f} s)", flush=True)
        elif step % 10 == 0:
            print(f"step {step} loss {loss.item():.3f} ({time.time() - t0:.0f} s)", flush=True)

    if args.save_state:
        torch.save(model.state_dict(), args.save_state)
    size = write_model(args.out, model, args.dtype)
    write_reference(args.reference, model, args.dtype)
    print(f"wrote {args.out} ({size} bytes) and {args.reference} in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
