"""Per-layer model profiles for the PACE iteration-time model (lab/hostctl_lab/sim/pace.py).

Each profile lists a model's layers in forward order. For each layer it gives the gradient tensors
(one all-reduce each: a weight and a bias are two tensors, as a framework sees them) and the
layer's forward FLOPs. The tensor sizes are computed analytically from the architecture's
parameter shapes (fp32, 4 bytes per element). No weights are downloaded. The parameter totals are
checked in tests/unit/test_sim_pace.py against the published torchvision counts.

Compute time per layer is the layer's share of the model's FLOPs times a measured total:
``fwd_s[l] = t_f * flops[l] / sum(flops)`` and ``bwd_s[l] = t_b * flops[l] / sum(flops)``.
The totals are paper 000's Table III (one Tesla V100, PyTorch 1.2, at the Table's batch size):

| model        | t_f (ms) | t_b (ms) | batch |
|--------------|----------|----------|-------|
| VGG-16       | 35.8     | 53.7     | 16    |
| ResNet-50    | 25.0     | 37.4     | 16    |
| Inception-V3 | 34.9     | 52.4     | 16    |
| LSTM-PTB     | 31.5     | 47.3     | 64    |

The Transformer is not in Table III. Its t_f is its FLOPs divided by the median effective V100
rate of the four Table III models (forward FLOPs / t_f), and t_b = 1.5 * t_f, the ratio all four
Table III rows show. This is our assumption, not a measurement.

Simplifications (all ours):
- A convolution and its batch norm are one layer (one compute op). Its gradient tensors are the
  conv weight (plus bias when the conv has one) and the BN's gamma and beta. FLOPs count the
  multiply-adds of convolutions and matrix products only (2 FLOPs per MAC).
- Branches (Inception modules) are listed in definition order, as a chain. A GPU runs them one
  after another anyway.
- An embedding lookup has no FLOPs, so its compute time is 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

BYTES_PER_PARAM = 4  # fp32 gradients


@dataclass(frozen=True)
class Layer:
    """One compute op: its gradient tensors (element counts) and its forward FLOPs."""

    name: str
    tensors: tuple[int, ...]  # number of elements of each gradient tensor
    flops: float  # forward FLOPs for the whole batch


@dataclass(frozen=True)
class ModelProfile:
    """A model as the iteration-time model sees it: layers in forward order, with times in seconds.

    ``fwd_s`` and ``bwd_s`` are per layer (forward order) and sum to ``t_f_s`` and ``t_b_s``.
    """

    name: str
    layers: tuple[Layer, ...]
    t_f_s: float
    t_b_s: float
    batch: int
    source: str  # where t_f and t_b come from
    fwd_s: np.ndarray = field(init=False, repr=False, compare=False)
    bwd_s: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        flops = np.array([ly.flops for ly in self.layers], dtype=float)
        share = flops / flops.sum()
        object.__setattr__(self, "fwd_s", self.t_f_s * share)
        object.__setattr__(self, "bwd_s", self.t_b_s * share)

    @property
    def n_params(self) -> int:
        return sum(sum(ly.tensors) for ly in self.layers)

    @property
    def n_tensors(self) -> int:
        return sum(len(ly.tensors) for ly in self.layers)

    @property
    def model_bytes(self) -> float:
        return float(self.n_params * BYTES_PER_PARAM)

    @property
    def tensor_bytes(self) -> np.ndarray:
        """All gradient tensors' sizes in bytes, in forward layer order."""
        return np.array([t for ly in self.layers for t in ly.tensors], dtype=float) * BYTES_PER_PARAM

    @property
    def flops(self) -> float:
        return float(sum(ly.flops for ly in self.layers))

    def scaled(self, compute_scale: float) -> ModelProfile:
        """The same model with every compute time multiplied by ``compute_scale`` (a slower GPU or a
        bigger batch)."""
        if not compute_scale > 0:
            raise ValueError(f"compute_scale must be > 0, got {compute_scale!r}")
        if compute_scale == 1.0:
            return self
        return ModelProfile(self.name, self.layers, self.t_f_s * compute_scale, self.t_b_s * compute_scale,
                            self.batch, f"{self.source}, compute x{compute_scale:g}")


# --------------------------------------------------------------------------- layer helpers

def _conv(name: str, cin: int, cout: int, kh: int, kw: int, hout: int, wout: int, batch: int,
          *, bias: bool = False, bn: bool = True) -> Layer:
    weight = cin * cout * kh * kw
    tensors = [weight]
    if bias:
        tensors.append(cout)
    if bn:
        tensors += [cout, cout]  # gamma, beta
    return Layer(name, tuple(tensors), 2.0 * weight * hout * wout * batch)


def _fc(name: str, nin: int, nout: int, rows: int, *, bias: bool = True) -> Layer:
    """A dense layer applied to ``rows`` vectors (images or tokens)."""
    return Layer(name, (nin * nout, nout) if bias else (nin * nout,), 2.0 * nin * nout * rows)


def _ln(name: str, d: int) -> Layer:
    return Layer(name, (d, d), 0.0)


# --------------------------------------------------------------------------- architectures

def vgg16_layers(batch: int) -> list[Layer]:
    """VGG-16 (configuration D), 224x224 input: 13 convs with bias, no BN, then 3 dense layers."""
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    layers, cin, hw, k = [], 3, 224, 0
    for c in cfg:
        if c == "M":
            hw //= 2
            continue
        k += 1
        layers.append(_conv(f"conv{k}", cin, int(c), 3, 3, hw, hw, batch, bias=True, bn=False))
        cin = int(c)
    layers.append(_fc("fc6", 512 * 7 * 7, 4096, batch))
    layers.append(_fc("fc7", 4096, 4096, batch))
    layers.append(_fc("fc8", 4096, 1000, batch))
    return layers


def resnet50_layers(batch: int) -> list[Layer]:
    """ResNet-50 (torchvision v1.5: stride on the 3x3 conv), 224x224 input; conv + BN per layer."""
    layers = [_conv("conv1", 3, 64, 7, 7, 112, 112, batch)]
    cin, hw = 64, 56
    for stage, (width, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3)), start=1):
        for b in range(blocks):
            stride = 2 if (b == 0 and stage > 1) else 1
            out_hw = hw // stride
            p = f"layer{stage}.{b}"
            layers.append(_conv(f"{p}.conv1", cin, width, 1, 1, hw, hw, batch))
            layers.append(_conv(f"{p}.conv2", width, width, 3, 3, out_hw, out_hw, batch))
            layers.append(_conv(f"{p}.conv3", width, 4 * width, 1, 1, out_hw, out_hw, batch))
            if b == 0:
                layers.append(_conv(f"{p}.downsample", cin, 4 * width, 1, 1, out_hw, out_hw, batch))
            cin, hw = 4 * width, out_hw
    layers.append(_fc("fc", 2048, 1000, batch))
    return layers


def inception_v3_layers(batch: int) -> list[Layer]:
    """Inception-V3 (torchvision, with the auxiliary classifier), 299x299 input; BasicConv2d = conv
    without bias + BN."""
    L: list[Layer] = []

    def c(name: str, cin: int, cout: int, k: tuple[int, int], hw: int) -> None:
        L.append(_conv(name, cin, cout, k[0], k[1], hw, hw, batch))

    c("Conv2d_1a_3x3", 3, 32, (3, 3), 149)
    c("Conv2d_2a_3x3", 32, 32, (3, 3), 147)
    c("Conv2d_2b_3x3", 32, 64, (3, 3), 147)
    c("Conv2d_3b_1x1", 64, 80, (1, 1), 73)
    c("Conv2d_4a_3x3", 80, 192, (3, 3), 71)
    for name, cin, pool in (("Mixed_5b", 192, 32), ("Mixed_5c", 256, 64), ("Mixed_5d", 288, 64)):  # InceptionA
        c(f"{name}.branch1x1", cin, 64, (1, 1), 35)
        c(f"{name}.branch5x5_1", cin, 48, (1, 1), 35)
        c(f"{name}.branch5x5_2", 48, 64, (5, 5), 35)
        c(f"{name}.branch3x3dbl_1", cin, 64, (1, 1), 35)
        c(f"{name}.branch3x3dbl_2", 64, 96, (3, 3), 35)
        c(f"{name}.branch3x3dbl_3", 96, 96, (3, 3), 35)
        c(f"{name}.branch_pool", cin, pool, (1, 1), 35)
    c("Mixed_6a.branch3x3", 288, 384, (3, 3), 17)  # InceptionB
    c("Mixed_6a.branch3x3dbl_1", 288, 64, (1, 1), 35)
    c("Mixed_6a.branch3x3dbl_2", 64, 96, (3, 3), 35)
    c("Mixed_6a.branch3x3dbl_3", 96, 96, (3, 3), 17)
    for name, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):  # InceptionC
        c(f"{name}.branch1x1", 768, 192, (1, 1), 17)
        c(f"{name}.branch7x7_1", 768, c7, (1, 1), 17)
        c(f"{name}.branch7x7_2", c7, c7, (1, 7), 17)
        c(f"{name}.branch7x7_3", c7, 192, (7, 1), 17)
        c(f"{name}.branch7x7dbl_1", 768, c7, (1, 1), 17)
        c(f"{name}.branch7x7dbl_2", c7, c7, (7, 1), 17)
        c(f"{name}.branch7x7dbl_3", c7, c7, (1, 7), 17)
        c(f"{name}.branch7x7dbl_4", c7, c7, (7, 1), 17)
        c(f"{name}.branch7x7dbl_5", c7, 192, (1, 7), 17)
        c(f"{name}.branch_pool", 768, 192, (1, 1), 17)
    c("AuxLogits.conv0", 768, 128, (1, 1), 5)  # after a 5x5/3 average pool of the 17x17 map
    c("AuxLogits.conv1", 128, 768, (5, 5), 1)
    L.append(_fc("AuxLogits.fc", 768, 1000, batch))
    c("Mixed_7a.branch3x3_1", 768, 192, (1, 1), 17)  # InceptionD
    c("Mixed_7a.branch3x3_2", 192, 320, (3, 3), 8)
    c("Mixed_7a.branch7x7x3_1", 768, 192, (1, 1), 17)
    c("Mixed_7a.branch7x7x3_2", 192, 192, (1, 7), 17)
    c("Mixed_7a.branch7x7x3_3", 192, 192, (7, 1), 17)
    c("Mixed_7a.branch7x7x3_4", 192, 192, (3, 3), 8)
    for name, cin in (("Mixed_7b", 1280), ("Mixed_7c", 2048)):  # InceptionE
        c(f"{name}.branch1x1", cin, 320, (1, 1), 8)
        c(f"{name}.branch3x3_1", cin, 384, (1, 1), 8)
        c(f"{name}.branch3x3_2a", 384, 384, (1, 3), 8)
        c(f"{name}.branch3x3_2b", 384, 384, (3, 1), 8)
        c(f"{name}.branch3x3dbl_1", cin, 448, (1, 1), 8)
        c(f"{name}.branch3x3dbl_2", 448, 384, (3, 3), 8)
        c(f"{name}.branch3x3dbl_3a", 384, 384, (1, 3), 8)
        c(f"{name}.branch3x3dbl_3b", 384, 384, (3, 1), 8)
        c(f"{name}.branch_pool", cin, 192, (1, 1), 8)
    L.append(_fc("fc", 2048, 1000, batch))
    return L


LSTM_PTB = dict(vocab=10000, hidden=1500, layers=2, seq_len=35)  # Zaremba et al.'s "large" PTB model


def lstm_ptb_layers(batch: int) -> list[Layer]:
    """The 2-layer, 1500-unit LSTM language model on PTB (vocab 10k, 35 steps): 66.0M parameters,
    251.9 MiB, Table III's 251.8 MB. PyTorch's nn.LSTM has two bias vectors per layer."""
    v, h, n = LSTM_PTB["vocab"], LSTM_PTB["hidden"], LSTM_PTB["layers"]
    tokens = batch * LSTM_PTB["seq_len"]
    layers = [Layer("embedding", (v * h,), 0.0)]
    for k in range(n):
        layers.append(Layer(f"lstm{k + 1}", (4 * h * h, 4 * h * h, 4 * h, 4 * h), 2.0 * 4 * h * 2 * h * tokens))
    layers.append(_fc("decoder", h, v, tokens))
    return layers


# Transformer "base" (Vaswani et al.) with untied source/target embeddings and output projection.
# The vocabulary is chosen so the total matches paper 003's Table II (91.8M parameters); sequence
# length and the source/target token split are our assumptions (FLOPs only).
TRANSFORMER = dict(d=512, ff=2048, enc=6, dec=6, vocab=31000, src_tokens=2048, tgt_tokens=2048, seq_len=32)


def _attn(name: str, d: int, tokens: int, kv_len: int) -> Layer:
    proj = 4 * (d * d)  # q, k, v, out
    flops = 2.0 * proj * tokens + 4.0 * d * kv_len * tokens  # projections + QK^T and AV
    return Layer(name, (d * d, d, d * d, d, d * d, d, d * d, d), flops)


def transformer_layers(batch_tokens: int) -> list[Layer]:
    cfg = TRANSFORMER
    d, ff, v, n = cfg["d"], cfg["ff"], cfg["vocab"], cfg["seq_len"]
    scale = batch_tokens / cfg["src_tokens"]
    src, tgt = int(cfg["src_tokens"] * scale), int(cfg["tgt_tokens"] * scale)
    L = [Layer("src_embedding", (v * d,), 0.0)]
    for k in range(cfg["enc"]):
        L += [_attn(f"enc{k}.self_attn", d, src, n), _ln(f"enc{k}.ln1", d),
              Layer(f"enc{k}.ffn", (d * ff, ff, ff * d, d), 2.0 * 2 * d * ff * src), _ln(f"enc{k}.ln2", d)]
    L.append(_ln("enc.ln", d))
    L.append(Layer("tgt_embedding", (v * d,), 0.0))
    for k in range(cfg["dec"]):
        L += [_attn(f"dec{k}.self_attn", d, tgt, n), _ln(f"dec{k}.ln1", d),
              _attn(f"dec{k}.cross_attn", d, tgt, n), _ln(f"dec{k}.ln2", d),
              Layer(f"dec{k}.ffn", (d * ff, ff, ff * d, d), 2.0 * 2 * d * ff * tgt), _ln(f"dec{k}.ln3", d)]
    L.append(_ln("dec.ln", d))
    L.append(_fc("out_proj", d, v, tgt))
    return L


# name -> (builder, t_f ms, t_b ms, batch) from paper 000 Table III (V100)
TABLE_III = {
    "vgg16": (vgg16_layers, 35.8, 53.7, 16),
    "resnet50": (resnet50_layers, 25.0, 37.4, 16),
    "inception_v3": (inception_v3_layers, 34.9, 52.4, 16),
    "lstm_ptb": (lstm_ptb_layers, 31.5, 47.3, 64),
}
TRANSFORMER_BATCH_TOKENS = 2048  # paper 003's per-GPU batch for the Transformer
MODELS = (*TABLE_III, "transformer")
_ALIASES = {"vgg16": "vgg16", "resnet50": "resnet50", "inceptionv3": "inception_v3", "lstmptb": "lstm_ptb",
            "transformer": "transformer", "inception3": "inception_v3"}  # (inception3: the engine's zoo name)


def canonical_name(name: str) -> str:
    """'VGG-16', 'vgg16', 'ResNet-50', 'Inception-V3' (or 'inception3'), 'LSTM-PTB', 'transformer' -> the
    profile key."""
    key = "".join(ch for ch in str(name).lower() if ch.isalnum())
    if key not in _ALIASES:
        raise ValueError(f"unknown model {name!r}; use one of {', '.join(MODELS)}")
    return _ALIASES[key]


def v100_flops_rate() -> float:
    """Median effective V100 rate (forward FLOP/s) over the Table III models: how the Transformer's
    compute time is estimated."""
    rates = [sum(ly.flops for ly in build(batch)) / (t_f / 1e3) for build, t_f, _, batch in TABLE_III.values()]
    return float(np.median(rates))


@lru_cache(maxsize=None)
def profile(name: str, compute_scale: float = 1.0) -> ModelProfile:
    """The profile of a model (see the module docstring); ``compute_scale`` multiplies its compute
    times (e.g. a slower GPU or a bigger batch, assumed linear)."""
    key = canonical_name(name)
    if key == "transformer":
        layers = tuple(transformer_layers(TRANSFORMER_BATCH_TOKENS))
        t_f = sum(ly.flops for ly in layers) / v100_flops_rate()
        base = ModelProfile(key, layers, t_f, 1.5 * t_f, TRANSFORMER_BATCH_TOKENS,
                            "estimated: FLOPs / median Table III V100 rate, t_b = 1.5 t_f")
    else:
        build, t_f_ms, t_b_ms, batch = TABLE_III[key]
        base = ModelProfile(key, tuple(build(batch)), t_f_ms / 1e3, t_b_ms / 1e3, batch,
                            "paper 000 Table III (V100)")
    return base.scaled(compute_scale)
