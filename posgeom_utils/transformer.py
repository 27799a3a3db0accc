"""A compact Transformer encoder whose positional mechanism is a parameter
(``POSITIONAL``). Chapter: *Why a Transformer needs positions*."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from . import checks
from .encodings import LowRankPositionalEncoding, alibi_slopes, frequencies, sinusoidal

POSITIONAL = ("none", "learned", "sinusoidal", "mds", "lowrank", "rope", "alibi")
TASKS = ("classify", "mlm")


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE: rotate planes (2k, 2k+1) of x (..., L, d_head) by the position's angle."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out


class SelfAttention(nn.Module):
    """Attention (optional RoPE/ALiBi). Chapter: *Why a Transformer needs positions*."""

    def __init__(
        self, d, n_heads, max_len, rope=False, alibi=False, causal=False, dropout=0.0
    ):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d // n_heads
        self.causal, self.dropout, self.rope, self.alibi = causal, dropout, rope, alibi
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        if rope:
            positions = torch.arange(max_len, dtype=torch.float64)[:, None]
            angles = positions * torch.as_tensor(frequencies(self.d_head))
            self.register_buffer("cos", angles.cos().float(), persistent=False)
            self.register_buffer("sin", angles.sin().float(), persistent=False)
        if alibi:
            pos = torch.arange(max_len)
            distance = (pos[None, :] - pos[:, None]).abs().float()
            slopes = torch.as_tensor(alibi_slopes(n_heads), dtype=torch.float32)
            self.register_buffer(
                "bias", -slopes[:, None, None] * distance[None], persistent=False
            )

    def forward(
        self, x: torch.Tensor, pad_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Attend over x (batch, L, d); ``pad_mask`` (batch, L) is True at padding keys.
        Chapter: *Why a Transformer needs positions*."""
        B, L, d = x.shape
        q, k, v = (
            self.qkv(x).view(B, L, 3, self.n_heads, self.d_head).permute(2, 0, 3, 1, 4)
        )
        if self.rope:
            q, k = (_rotate(t, self.cos[:L], self.sin[:L]) for t in (q, k))
        mask = None
        if self.alibi:
            mask = self.bias[:, :L, :L].unsqueeze(0).expand(B, -1, -1, -1)
        if pad_mask is not None:  # True where the key is padding
            blocked = torch.zeros(
                B, 1, 1, L, dtype=q.dtype, device=x.device
            ).masked_fill(pad_mask[:, None, None, :], float("-inf"))
            mask = blocked if mask is None else mask + blocked
        if self.causal:
            causal = torch.full((L, L), float("-inf"), device=x.device).triu(1)
            mask = causal if mask is None else mask + causal
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0
        )
        return self.out(y.transpose(1, 2).reshape(B, L, d))


class Block(nn.Module):
    """Pre-LayerNorm Transformer block. Chapter: *Why a Transformer needs positions*."""

    def __init__(self, d, n_heads, d_ff, max_len, rope, alibi, causal, dropout):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = SelfAttention(d, n_heads, max_len, rope, alibi, causal, dropout)
        self.ff = nn.Sequential(
            nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d), nn.Dropout(dropout)
        )

    def forward(self, x: torch.Tensor, pad_mask: torch.Tensor | None) -> torch.Tensor:
        """Pre-norm attention, then feed-forward. Chapter: *Why a Transformer needs
        positions*."""
        x = x + self.attn(self.ln1(x), pad_mask)
        return x + self.ff(self.ln2(x))


def _check_arguments(
    positional, task, d, n_heads, max_len, table, rank
) -> np.ndarray | None:
    """Refuse an inconsistent set-up; return ``table`` as float32."""
    checks.choice(positional, "positional", POSITIONAL)
    checks.choice(task, "task", TASKS)
    divides = f"divisible by n_heads={n_heads}"
    checks.multiple(d, "d", n_heads, divides, "change n_heads")
    if positional == "rope":
        fix = "RoPE rotates pairs of coordinates: change d or n_heads"
        checks.multiple(d // n_heads, "d // n_heads", 2, "an even head width", fix)
    if table is not None and positional not in ("mds", "lowrank"):
        what = "'mds' or 'lowrank' when table= is given"
        raise checks.fail("positional", what, positional, "drop table=")
    if rank is not None and positional != "lowrank":
        what = "'lowrank' when rank= is given"
        raise checks.fail("positional", what, positional, "drop rank=")
    if positional == "mds" and table is None:
        raise ValueError(
            "positional='mds' needs table= (e.g. encodings.mds_encoding(D, d))"
        )
    if positional == "lowrank" and rank is None:
        raise ValueError("positional='lowrank' needs rank= (the r of P = A B^T)")
    if table is None:
        return None
    table = np.asarray(table, dtype=np.float32)
    width = "d" if positional == "mds" else "rank"
    shape = (max_len, d if positional == "mds" else rank)
    if table.shape != shape:
        raise checks.fail("table.shape", f"(max_len, {width}) = {shape}", table.shape)
    return table


class PositionalTransformer(nn.Module):
    """Token embeddings + a positional mechanism + Transformer blocks + a ``task`` head.
    Chapter: *Why a Transformer needs positions*."""

    def __init__(
        self,
        vocab_size: int,
        d: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        max_len: int = 64,
        positional: str = "learned",
        task: str = "classify",
        num_classes: int = 2,
        d_ff: int | None = None,
        dropout: float = 0.0,
        causal: bool = False,
        table: np.ndarray | None = None,
        rank: int | None = None,
        pad_id: int = 0,
    ):
        super().__init__()
        table = _check_arguments(positional, task, d, n_heads, max_len, table, rank)
        self.positional, self.task = positional, task
        self.max_len, self.pad_id = max_len, pad_id
        self.embed = nn.Embedding(vocab_size, d)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.position: nn.Module | None = None
        if positional == "learned":
            self.pos_table = nn.Parameter(torch.randn(max_len, d) * 0.02)
        elif positional == "sinusoidal":
            sin = torch.as_tensor(sinusoidal(max_len, d), dtype=torch.float32)
            self.register_buffer("pos_table", sin)
        elif positional == "mds":
            self.register_buffer("pos_table", torch.as_tensor(table))
        elif positional == "lowrank":
            self.position = LowRankPositionalEncoding(max_len, d, rank)
            if table is not None:
                with torch.no_grad():
                    self.position.A.copy_(torch.as_tensor(table))
        rope, alibi = positional == "rope", positional == "alibi"
        self.blocks = nn.ModuleList(
            Block(d, n_heads, d_ff or 4 * d, max_len, rope, alibi, causal, dropout)
            for _ in range(n_layers)
        )
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, num_classes if task == "classify" else vocab_size)

    def positional_table(self) -> torch.Tensor | None:
        """Added n x d table or None. Chapter: *Why a Transformer needs positions*."""
        if self.position is not None:
            return self.position.table()
        return getattr(self, "pos_table", None)

    def positional_parameters(self) -> int:
        """Trainable numbers in the positional mechanism (n d learned, r (n + d)
        low-rank, else 0). Chapter: *How many numbers does a positional encoding
        need?*."""
        if self.positional == "learned":
            return self.pos_table.numel()
        if self.position is not None:
            return sum(p.numel() for p in self.position.parameters())
        return 0

    def _check_ids(self, ids: torch.Tensor) -> None:
        if ids.dim() != 2:
            raise ValueError(f"ids must be (batch, length), got {tuple(ids.shape)}")
        if ids.numel():  # one min/max over the batch, not a per-token check
            low, high = (int(v) for v in torch.aminmax(ids))
            vocab = self.embed.num_embeddings
            if low < 0 or high >= vocab:
                raise ValueError(
                    f"ids must be token ids in [0, vocab_size={vocab}), got values in "
                    f"[{low}, {high}]: build the model with vocab_size > the largest id"
                )
        if ids.shape[1] > self.max_len:
            raise ValueError(
                f"sequence length {ids.shape[1]} exceeds max_len={self.max_len}"
            )

    def hidden_states(self, ids: torch.Tensor) -> torch.Tensor:
        """Last-layer states (batch, L, d) of ids (batch, L) in ``[0, vocab_size)``;
        ``pad_id`` marks padding. Chapter: *Why a Transformer needs positions*."""
        self._check_ids(ids)
        # the computation
        pad_mask = ids == self.pad_id
        x = self.embed(ids)
        table = self.positional_table()
        if table is not None:
            x = x + table[: ids.shape[1]]
        for block in self.blocks:
            x = block(x, pad_mask)
        return self.ln(x)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits: (batch, num_classes) for ``classify``, (batch, L, vocab_size) for
        ``mlm``. Chapter: *Why a Transformer needs positions*."""
        h = self.hidden_states(ids)
        if self.task == "mlm":
            return self.head(h)
        keep = (ids != self.pad_id).unsqueeze(-1).to(h.dtype)
        pooled = (h * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return self.head(pooled)


def count_parameters(model: nn.Module) -> int:
    """Trained numbers. Chapter: *How many numbers does a positional encoding need?*."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def describe(model: PositionalTransformer) -> dict[str, Any]:
    """A small summary for tables: positional mechanism, its parameters, total
    parameters. Chapter: *How many numbers does a positional encoding need?*."""
    return {
        "positional": model.positional,
        "positional parameters": model.positional_parameters(),
        "parameters": count_parameters(model),
        "d": model.embed.embedding_dim,
        "layers": len(model.blocks),
        "max_len": model.max_len,
    }
