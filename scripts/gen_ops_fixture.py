#!/usr/bin/env python3
"""Writes tests/fixtures/ops_hf_zaya.bin: inputs, outputs and autograd gradients of the pieces of
Hugging Face transformers' `zaya` model that the ops of src/ops/ops.h implement, on tiny shapes.
tests/test_ops_hf.c runs the ops on the same inputs and compares.

HF's own modules and functions are the reference (ZayaCCAProjection, ZayaQKNorm,
ZayaRotaryEmbedding + apply_rotary_pos_emb, eager_attention_forward with HF's causal and
sliding-window masks, ZayaRouter, ZayaRMSNorm, ZayaResidualScaling, nn.Embedding with padding_idx,
cross_entropy). Where an op starts from an intermediate tensor of a module (the CCA convolution
starts from q0|k0, the router op from its logits), the module's input projection is set to an
identity so the intermediate is the input.

Runs on the CPU in fp32 with ATEN_CPU_CAPABILITY=default: torch's vectorised pow (AVX2/AVX-512
Sleef) is not correctly rounded and can differ by one ulp from the scalar pow in ~1% of RoPE
inverse frequencies, which at positions in the thousands moves angles by ~1e-4 rad.

File format (little endian): b"ZYF1", u32 count, then per tensor: u32 name length, name bytes,
u32 dtype (0 = f32, 1 = i32), u32 ndim, u32 dims[ndim], data.
Usage: python3 scripts/gen_ops_fixture.py [out_path]
"""
import os
import struct
import sys

os.environ.setdefault("ATEN_CPU_CAPABILITY", "default")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from transformers.masking_utils import (  # noqa: E402
    create_causal_mask,
    create_sliding_window_causal_mask,
)
from transformers.models.zaya.configuration_zaya import ZayaConfig  # noqa: E402
from transformers.models.zaya.modeling_zaya import (  # noqa: E402
    ZayaCCAProjection,
    ZayaQKNorm,
    ZayaResidualScaling,
    ZayaRMSNorm,
    ZayaRotaryEmbedding,
    ZayaRouter,
    apply_rotary_pos_emb,
    eager_attention_forward,
)

B, T, HQ, HK, HD = 2, 11, 4, 2, 8
C = (HQ + HK) * HD
N = B * T
POS0 = 3000  # positions POS0 .. POS0+T-1: RoPE angles in the thousands of radians
WINDOW = 4

tensors = {}


def put(name, t):
    t = t.detach() if isinstance(t, torch.Tensor) else torch.as_tensor(t)
    tensors[name] = t.contiguous().cpu()


def config(**kw):
    base = dict(
        hidden_size=C,
        num_attention_heads=HQ,
        num_key_value_heads=HK,
        head_dim=HD,
        num_hidden_layers=2,
        layer_types=["hybrid", "hybrid_sliding"],
        sliding_window=WINDOW,
        rope_parameters={
            "hybrid": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
            "hybrid_sliding": {
                "rope_type": "default",
                "rope_theta": 5e6,
                "partial_rotary_factor": 0.25,
            },
        },
        cca_time0=2,
        cca_time1=2,
        vocab_size=32,
        num_experts=6,
        router_hidden_size=7,
        moe_intermediate_size=8,
        bos_token_id=None,
        eos_token_id=None,
    )
    base.update(kw)
    cfg = ZayaConfig(**base)
    cfg._attn_implementation = "eager"
    return cfg


def cca():
    """ZayaCCAProjection with q_proj/k_proj = identity slices, so its input is q0|k0."""
    cfg = config()
    m = ZayaCCAProjection(cfg, layer_idx=0)
    with torch.no_grad():
        eye = torch.eye(C)
        m.q_proj.weight.copy_(eye[: HQ * HD])
        m.k_proj.weight.copy_(eye[HQ * HD :])
        m.v_proj_current.weight.normal_(0, 0.3)
        m.v_proj_delayed.weight.normal_(0, 0.3)
        m.conv_qk_depthwise.weight.normal_(0, 0.7)
        m.conv_qk_depthwise.bias.normal_(0, 0.3)
        m.conv_qk_grouped.weight.normal_(0, 0.4)
        m.conv_qk_grouped.bias.normal_(0, 0.3)
    h = torch.randn(B, T, C, requires_grad=True)
    q, k, v = m(h, None)
    rq, rk = torch.randn_like(q), torch.randn_like(k)
    ((q * rq).sum() + (k * rk).sum()).backward()
    put("cca.qk0", h.reshape(N, C))
    put("cca.w1", m.conv_qk_depthwise.weight.reshape(C, 2))
    put("cca.b1", m.conv_qk_depthwise.bias)
    put("cca.w2", m.conv_qk_grouped.weight)
    put("cca.b2", m.conv_qk_grouped.bias)
    put("cca.q", q.reshape(N, HQ * HD))
    put("cca.k", k.reshape(N, HK * HD))
    put("cca.dq", rq.reshape(N, HQ * HD))
    put("cca.dk", rk.reshape(N, HK * HD))
    put("cca.dqk0", h.grad.reshape(N, C))
    put("cca.dw1", m.conv_qk_depthwise.weight.grad.reshape(C, 2))
    put("cca.db1", m.conv_qk_depthwise.bias.grad)
    put("cca.dw2", m.conv_qk_grouped.weight.grad)
    put("cca.db2", m.conv_qk_grouped.bias.grad)
    with torch.no_grad():
        put("cca.vcur", F.linear(h, m.v_proj_current.weight).reshape(N, -1))
        put("cca.vdel", F.linear(h, m.v_proj_delayed.weight).reshape(N, -1))
    put("cca.v", v.reshape(N, HK * HD))


def qknorm_rope(layer_type, tag, tiny_q=False):
    """ZayaQKNorm, then ZayaRotaryEmbedding + apply_rotary_pos_emb, as ZayaAttention runs them.
    tiny_q: every query head below the norm clamp (kept apart: its gradients are ~1e8 larger)."""
    cfg = config()
    qk = ZayaQKNorm(cfg)
    rot = ZayaRotaryEmbedding(cfg)
    with torch.no_grad():
        qk.temp.copy_(torch.randn(HK))
    q = torch.randn(B, T, HQ, HD) * (1e-9 if tiny_q else 1.0)
    q.requires_grad_(True)
    k = torch.randn(B, T, HK, HD, requires_grad=True)
    pos = (torch.arange(T) + POS0).unsqueeze(0).expand(B, T).contiguous()
    pos[1] = torch.randint(0, 40000, (T,))
    qn, kn = qk(q, k)
    cos, sin = rot(qn, pos, layer_type)
    qo, ko = apply_rotary_pos_emb(qn.transpose(1, 2), kn.transpose(1, 2), cos, sin)
    qo, ko = qo.transpose(1, 2), ko.transpose(1, 2)
    gq, gk = torch.randn_like(qo), torch.randn_like(ko)
    ((qo * gq).sum() + (ko * gk).sum()).backward()
    p = cfg.rope_parameters[layer_type]
    put(tag + ".theta", torch.tensor([p["rope_theta"]], dtype=torch.float32))
    put(tag + ".rot", torch.tensor([int(HD * p["partial_rotary_factor"])], dtype=torch.int32))
    put(tag + ".pos", pos.reshape(N).to(torch.int32))
    put(tag + ".temp", qk.temp)
    put(tag + ".q_in", q.reshape(N, HQ * HD))
    put(tag + ".k_in", k.reshape(N, HK * HD))
    put(tag + ".q", qo.reshape(N, HQ * HD))
    put(tag + ".k", ko.reshape(N, HK * HD))
    put(tag + ".gq", gq.reshape(N, HQ * HD))
    put(tag + ".gk", gk.reshape(N, HK * HD))
    put(tag + ".dq", q.grad.reshape(N, HQ * HD))
    put(tag + ".dk", k.grad.reshape(N, HK * HD))
    put(tag + ".dtemp", qk.temp.grad)


def attention(sliding, tag):
    """eager_attention_forward with the mask HF builds for a full or a sliding-window layer."""
    cfg = config()
    emb = torch.zeros(B, T, C)
    pos = torch.arange(T).unsqueeze(0).expand(B, T)
    make = create_sliding_window_causal_mask if sliding else create_causal_mask
    mask = make(config=cfg, inputs_embeds=emb, attention_mask=None, past_key_values=None,
                position_ids=pos)
    if mask is not None and mask.dtype == torch.bool:  # boolean "may attend" -> additive
        mask = torch.where(mask, 0.0, torch.finfo(torch.float32).min)
    if mask is None:  # HF may skip the mask and rely on is_causal; build the causal one
        i = torch.arange(T)
        mask = torch.where(i[None, :] <= i[:, None], 0.0, torch.finfo(torch.float32).min)
        mask = mask[None, None].expand(B, 1, T, T)
    mod = nn.Module()
    mod.num_key_value_groups = HQ // HK
    mod.training = False
    q = torch.randn(B, HQ, T, HD, requires_grad=True)
    k = torch.randn(B, HK, T, HD, requires_grad=True)
    v = torch.randn(B, HK, T, HD, requires_grad=True)
    o, _ = eager_attention_forward(mod, q, k, v, mask, scaling=HD**-0.5)
    go = torch.randn_like(o)
    (o * go).sum().backward()
    rows = lambda x: x.transpose(1, 2).reshape(N, -1)  # noqa: E731  [B,H,T,d] -> [N, H*d]
    put(tag + ".window", torch.tensor([WINDOW if sliding else 0], dtype=torch.int32))
    put(tag + ".q", rows(q))
    put(tag + ".k", rows(k))
    put(tag + ".v", rows(v))
    put(tag + ".out", o.reshape(N, HQ * HD))  # eager returns [B, T, H, d]
    put(tag + ".dout", go.reshape(N, HQ * HD))
    put(tag + ".dq", rows(q.grad))
    put(tag + ".dk", rows(k.grad))
    put(tag + ".dv", rows(v.grad))


def router():
    """ZayaRouter with down_proj = identity and router_mlp = identity: its input is the logits."""
    E = 6
    cfg = config(hidden_size=E + 1, router_hidden_size=E + 1, num_experts=E)
    r = ZayaRouter(cfg, layer_idx=0)
    r.router_mlp = nn.Identity()
    with torch.no_grad():
        r.down_proj.weight.copy_(torch.eye(E + 1))
        r.down_proj.bias.zero_()
        r.balancing_biases.copy_(torch.randn(E + 1) * 0.05)
        r.balancing_biases[-1] = -0.02
    x = torch.randn(B, T, E + 1) * 1.5
    x[0, 2, E] = 8.0  # rows that pick the skip class
    x[1, 5, E] = 8.0
    x.requires_grad_(True)
    _, gate, idx, _ = r(x)
    rg = torch.randn_like(gate)
    (gate * rg).sum().backward()
    put("router.logits", x.reshape(N, E + 1))
    put("router.bias", r.balancing_biases)
    put("router.gate", gate.reshape(N))
    put("router.index", idx.reshape(N).to(torch.int32))  # skip rows read 0 here (HF masks them)
    put("router.dgate", rg.reshape(N))
    put("router.dlogits", x.grad.reshape(N, E + 1))


def small_ops():
    # RMSNorm
    norm = ZayaRMSNorm(24, eps=1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(24) + 0.5)
    x = torch.randn(N, 24, requires_grad=True)
    y = norm(x)
    g = torch.randn_like(y)
    (y * g).sum().backward()
    for n, t in [("x", x), ("w", norm.weight), ("y", y), ("dy", g), ("dx", x.grad),
                 ("dw", norm.weight.grad)]:
        put("rmsnorm." + n, t)
    # residual scaling
    rs = ZayaResidualScaling(24)
    with torch.no_grad():
        for p in rs.parameters():
            p.copy_(torch.randn(24) * 0.5)
        rs.hidden_states_scale.add_(1.0)
        rs.residual_scale.add_(1.0)
    o = torch.randn(N, 24, requires_grad=True)
    h = torch.randn(N, 24, requires_grad=True)
    out = rs(o, h)
    g = torch.randn_like(out)
    (out * g).sum().backward()
    for n, t in [("o", o), ("h", h), ("ob", rs.hidden_states_bias), ("os", rs.hidden_states_scale),
                 ("rb", rs.residual_bias), ("rs", rs.residual_scale), ("out", out), ("dout", g),
                 ("d_o", o.grad), ("dh", h.grad), ("dob", rs.hidden_states_bias.grad),
                 ("dos", rs.hidden_states_scale.grad), ("drb", rs.residual_bias.grad),
                 ("drs", rs.residual_scale.grad)]:
        put("resscale." + n, t)
    # embedding with padding_idx, then the input affine (ZayaModel.forward)
    V, D = 9, 10
    emb = nn.Embedding(V, D, padding_idx=0)
    with torch.no_grad():
        emb.weight.normal_()
    bias = (torch.randn(D) * 0.3).requires_grad_(True)
    scale = (torch.rand(D) + 0.5).requires_grad_(True)
    ids = torch.randint(0, V, (N,))
    ids[3] = ids[7] = 0
    hh = (emb(ids) + bias) * scale
    g = torch.randn_like(hh)
    (hh * g).sum().backward()
    for n, t in [("emb", emb.weight), ("bias", bias), ("scale", scale), ("h", hh), ("dh", g),
                 ("demb", emb.weight.grad), ("dbias", bias.grad), ("dscale", scale.grad)]:
        put("embed." + n, t)
    put("embed.ids", ids.to(torch.int32))
    # cross-entropy, summed, with ignore_index rows
    V = 19
    logits = (torch.randn(N, V) * 3).requires_grad_(True)
    tg = torch.randint(0, V, (N,))
    tg[1] = tg[8] = -100
    loss = F.cross_entropy(logits, tg, ignore_index=-100, reduction="sum")
    (loss * 0.37).backward()
    put("xent.logits", logits)
    put("xent.targets", tg.to(torch.int32))
    put("xent.loss", loss.reshape(1))
    put("xent.dlogits", logits.grad)
    # exact GELU and SiLU-gated unit
    x = (torch.randn(N, 16) * 3).requires_grad_(True)
    y = nn.GELU()(x)
    g = torch.randn_like(y)
    (y * g).sum().backward()
    for n, t in [("x", x), ("y", y), ("dy", g), ("dx", x.grad)]:
        put("gelu." + n, t)
    gu = (torch.randn(N, 2 * 8) * 2).requires_grad_(True)
    gate, up = gu.chunk(2, dim=-1)
    y = F.silu(gate) * up
    g = torch.randn_like(y)
    (y * g).sum().backward()
    for n, t in [("gu", gu), ("y", y), ("dy", g), ("dgu", gu.grad)]:
        put("swiglu." + n, t)


def write(path):
    with open(path, "wb") as f:
        f.write(b"ZYF1")
        f.write(struct.pack("<I", len(tensors)))
        for name, t in tensors.items():
            a = t.numpy()
            code = {np.dtype(np.float32): 0, np.dtype(np.int32): 1}[a.dtype]
            nb = name.encode()
            f.write(struct.pack("<I", len(nb)) + nb)
            f.write(struct.pack("<II", code, a.ndim))
            f.write(struct.pack("<%dI" % a.ndim, *a.shape))
            f.write(a.astype(a.dtype.newbyteorder("<")).tobytes())


def main():
    torch.manual_seed(20250101)
    cca()
    qknorm_rope("hybrid", "rope_a")
    qknorm_rope("hybrid_sliding", "rope_b")
    qknorm_rope("hybrid", "rope_c", tiny_q=True)
    attention(False, "att_full")
    attention(True, "att_slide")
    router()
    small_ops()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests/fixtures/ops_hf_zaya.bin")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    write(out)
    print("wrote %s (%d tensors, %d bytes)" % (out, len(tensors), os.path.getsize(out)))


if __name__ == "__main__":
    main()
