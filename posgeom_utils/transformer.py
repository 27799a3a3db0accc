"""A compact Transformer encoder whose positional mechanism is a parameter.

Chapter: *Low rank* (training demonstration); the necessity and separation chapters
build on it.

``positional`` is one of ``none``, ``learned``, ``sinusoidal``, ``mds`` (a fixed table,
e.g. from :func:`~posgeom_utils.encodings.mds_encoding`), ``lowrank``
(trainable P = A B^T), ``rope`` (rotates queries and keys) or ``alibi`` (biases
attention logits by -m_h |i - j|). Additive encodings are added to the token embeddings.
Attention uses :func:`torch.nn.functional.scaled_dot_product_attention`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .encodings import LowRankPositionalEncoding, alibi_slopes, frequencies, sinusoidal

POSITIONAL = ("none", "learned", "sinusoidal", "mds", "lowrank", "rope", "alibi")
TASKS = ("classify", "mlm")


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Apply RoPE to x (..., L, d_head): rotate each plane (2k, 2k+1) by the position's
    angle."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out


class SelfAttention(nn.Module):
    """Multi-head self-attention with optional RoPE and ALiBi. Chapter: *Low rank* (and
    *MDS optimality* for RoPE and ALiBi as geometries)."""

    def __init__(
        self,
        d: int,
        n_heads: int,
        max_len: int,
        rope: bool = False,
        alibi: bool = False,
        causal: bool = False,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.n_heads, self.d_head, self.causal, self.dropout = (
            n_heads,
            d // n_heads,
            causal,
            dropout,
        )
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.rope = rope
        if rope:
            angles = torch.arange(max_len, dtype=torch.float64)[
                :, None
            ] * torch.as_tensor(frequencies(self.d_head))
            self.register_buffer("cos", angles.cos().float(), persistent=False)
            self.register_buffer("sin", angles.sin().float(), persistent=False)
        self.alibi = alibi
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
        Chapter: *Low rank*."""
        B, L, d = x.shape
        q, k, v = (
            self.qkv(x).view(B, L, 3, self.n_heads, self.d_head).permute(2, 0, 3, 1, 4)
        )
        if self.rope:
            q, k = (
                _rotate(q, self.cos[:L], self.sin[:L]),
                _rotate(k, self.cos[:L], self.sin[:L]),
            )
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
    """Pre-LayerNorm Transformer block. Chapter: *Low rank*."""

    def __init__(
        self,
        d: int,
        n_heads: int,
        d_ff: int,
        max_len: int,
        rope: bool,
        alibi: bool,
        causal: bool,
        dropout: float,
    ):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = SelfAttention(d, n_heads, max_len, rope, alibi, causal, dropout)
        self.ff = nn.Sequential(
            nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d), nn.Dropout(dropout)
        )

    def forward(self, x: torch.Tensor, pad_mask: torch.Tensor | None) -> torch.Tensor:
        """x + attention, then + feed-forward, each on the layer-normed input.
        Chapter: *Low rank*."""
        x = x + self.attn(self.ln1(x), pad_mask)
        return x + self.ff(self.ln2(x))


class PositionalTransformer(nn.Module):
    """Token embeddings + a positional mechanism + Transformer blocks + a task head.

    ``task="classify"`` mean-pools the non-padding tokens and predicts ``num_classes``
    logits (a readout that is permutation-invariant, so with ``positional="none"`` the
    whole model is); ``task="mlm"`` predicts a token at every position. ``table`` is the
    fixed n x d matrix for ``mds`` or the n x r MDS coordinates that initialise
    ``lowrank`` (whose rank is ``rank``). Chapter: *Low rank*.
    """

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
        if positional not in POSITIONAL:
            raise ValueError(
                f"positional must be one of {POSITIONAL}, got {positional!r}"
            )
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {task!r}")
        if d % n_heads:
            raise ValueError(f"d={d} must be divisible by n_heads={n_heads}")
        if positional == "rope" and (d // n_heads) % 2:
            raise ValueError(
                "positional='rope' needs an even head width, got "
                f"d/n_heads={d // n_heads}"
            )
        if table is not None and positional not in ("mds", "lowrank"):
            raise ValueError(
                "table= is only used by positional='mds' or 'lowrank', not "
                f"{positional!r}"
            )
        if rank is not None and positional != "lowrank":
            raise ValueError(
                f"rank= is only used by positional='lowrank', not {positional!r}"
            )
        self.positional, self.task, self.max_len, self.pad_id = (
            positional,
            task,
            max_len,
            pad_id,
        )
        self.embed = nn.Embedding(vocab_size, d)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.position: nn.Module | None = None
        if positional == "learned":
            self.pos_table = nn.Parameter(torch.randn(max_len, d) * 0.02)
        elif positional == "sinusoidal":
            self.register_buffer(
                "pos_table",
                torch.as_tensor(sinusoidal(max_len, d), dtype=torch.float32),
            )
        elif positional == "mds":
            if table is None:
                raise ValueError(
                    "positional='mds' needs table=: an (n, d) matrix, e.g. "
                    "encodings.mds_encoding(D, d)"
                )
            table = np.asarray(table, dtype=np.float32)
            if table.shape != (max_len, d):
                raise ValueError(
                    f"table must have shape (max_len, d) = ({max_len}, {d}), got "
                    f"{table.shape}"
                )
            self.register_buffer("pos_table", torch.as_tensor(table))
        elif positional == "lowrank":
            if rank is None:
                raise ValueError(
                    "positional='lowrank' needs rank= (the r of P = A B^T)"
                )
            self.position = LowRankPositionalEncoding(max_len, d, rank)
            if table is not None:
                coords = np.asarray(table, dtype=np.float32)
                if coords.shape != (max_len, rank):
                    raise ValueError(
                        f"table for lowrank must be the (max_len, rank) = ({max_len}, "
                        f"{rank}) MDS coordinates, got {coords.shape}"
                    )
                with torch.no_grad():
                    self.position.A.copy_(torch.as_tensor(coords))
        self.blocks = nn.ModuleList(
            Block(
                d,
                n_heads,
                d_ff or 4 * d,
                max_len,
                positional == "rope",
                positional == "alibi",
                causal,
                dropout,
            )
            for _ in range(n_layers)
        )
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, num_classes if task == "classify" else vocab_size)

    def positional_table(self) -> torch.Tensor | None:
        """The additive n x d table (None for none/rope/alibi), for recording during
        training.

        Chapter: *Low rank*.
        """
        if self.position is not None:
            return self.position.table()
        return getattr(self, "pos_table", None)

    def positional_parameters(self) -> int:
        """Trainable numbers in the positional mechanism (n d learned, r (n + d)
        low-rank, else 0).

        Chapter: *Low rank*.
        """
        if self.positional == "learned":
            return self.pos_table.numel()
        if self.position is not None:
            return sum(p.numel() for p in self.position.parameters())
        return 0

    def hidden_states(self, ids: torch.Tensor) -> torch.Tensor:
        """The last layer's states (batch, L, d) for token ids (batch, L); ``pad_id``
        marks padding.

        Ids must lie in ``[0, vocab_size)``. Chapter: *Low rank*.
        """
        if ids.dim() != 2:
            raise ValueError(
                f"ids must be (batch, length), got shape {tuple(ids.shape)}"
            )
        if ids.numel():  # one min/max over the batch, not a per-token check
            low, high = (int(v) for v in torch.aminmax(ids))
            vocab = self.embed.num_embeddings
            if low < 0 or high >= vocab:
                raise ValueError(
                    f"ids must be token ids in [0, vocab_size={vocab}), got values in "
                    f"[{low}, {high}]: build the model with vocab_size > the largest "
                    "id (e.g. TokenTask.vocab_size)"
                )
        L = ids.shape[1]
        if L > self.max_len:
            raise ValueError(
                f"sequence length {L} exceeds max_len={self.max_len} of the positional "
                "encoding"
            )
        pad_mask = ids == self.pad_id
        x = self.embed(ids)
        table = self.positional_table()
        if table is not None:
            x = x + table[:L]
        for block in self.blocks:
            x = block(x, pad_mask)
        return self.ln(x)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits: (batch, num_classes) for ``classify``, (batch, L, vocab_size) for
        ``mlm``. Chapter: *Low rank*."""
        h = self.hidden_states(ids)
        if self.task == "mlm":
            return self.head(h)
        keep = (ids != self.pad_id).unsqueeze(-1).to(h.dtype)
        pooled = (h * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return self.head(pooled)


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters of a model. Chapter: *Low rank*."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def describe(model: PositionalTransformer) -> dict[str, Any]:
    """A small summary for tables: positional mechanism, its parameters, total
    parameters.

    Chapter: *Low rank*.
    """
    return {
        "positional": model.positional,
        "positional parameters": model.positional_parameters(),
        "parameters": count_parameters(model),
        "d": model.embed.embedding_dim,
        "layers": len(model.blocks),
        "max_len": model.max_len,
    }
