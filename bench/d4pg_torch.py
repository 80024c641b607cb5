#!/usr/bin/env python3
"""D4PG learner steps per second in PyTorch: the peer of bench/bench_d4pg.c.

The same networks (Acme's TF D4PG defaults: LayerNormMLP policy 256x3 with a
tanh head, critic concat(obs, act) -> LayerNormMLP 512-512-256 -> 51 logits),
batch, losses and update as models/d4pg: target networks copied every 100
steps, the categorical projection, cross-entropy for the critic, the
deterministic policy gradient with dQ/da norm-clipped to 1, each network's
gradients clipped to a global norm of 40, two Adam optimizers (lr 1e-4).
Run it through bench/torch_env.sh (OPENBLAS_NUM_THREADS=1, Debian's python3):

    SCRIPT=bench/d4pg_torch.py bench/torch_env.sh --obs 17 --act 6 --threads 2 --json

--precision bf16 runs the forward passes under PyTorch's CPU mixed precision,
torch.cpu.amp.autocast(dtype=torch.bfloat16): the linear layers in bf16, the
layer norm in f32 (1.13's CPU layer norm refuses bf16 input with f32 weights,
so its input is cast back), tanh and ELU on the activations they get, softmax
and the losses in f32 (the logits are taken as f32 first); the backward
passes, clipping and Adam outside it, on f32 master weights.
--precision both runs f32 then bf16, one line each.
"""
import argparse
import contextlib
import copy
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class LayerNormMLP(nn.Module):
    """Linear -> LayerNorm -> tanh, then Linear -> ELU for each further layer."""

    def __init__(self, n_in, sizes):
        super().__init__()
        self.first = nn.Linear(n_in, sizes[0])
        self.norm = nn.LayerNorm(sizes[0], eps=1e-5)
        self.rest = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        for lin in [self.first, *self.rest]:
            bound = (3 * 0.333 / lin.out_features) ** 0.5  # VarianceScaling(0.333, fan_out, uniform)
            nn.init.uniform_(lin.weight, -bound, bound)
            nn.init.zeros_(lin.bias)

    def forward(self, x):
        # .float(): under bf16 autocast the linear layer gives bf16, and 1.13's CPU layer norm
        # takes no bf16 input with f32 weights; the norm runs in f32 (a no-op in f32 runs).
        x = torch.tanh(self.norm(self.first(x).float()))
        for lin in self.rest:
            x = F.elu(lin(x))
        return x


class Policy(nn.Module):
    def __init__(self, obs, act, sizes=(256, 256, 256)):
        super().__init__()
        self.torso = LayerNormMLP(obs, list(sizes))
        self.head = nn.Linear(sizes[-1], act)
        bound = (3e-4 / sizes[-1]) ** 0.5
        nn.init.uniform_(self.head.weight, -bound, bound)
        nn.init.zeros_(self.head.bias)

    def forward(self, obs):
        return torch.tanh(self.head(self.torso(obs)))


class Critic(nn.Module):
    def __init__(self, obs, act, atoms, sizes=(512, 512, 256)):
        super().__init__()
        self.torso = LayerNormMLP(obs + act, list(sizes))
        self.head = nn.Linear(sizes[-1], atoms)
        bound = (3.0 / sizes[-1]) ** 0.5
        nn.init.uniform_(self.head.weight, -bound, bound)
        nn.init.zeros_(self.head.bias)

    def forward(self, obs, act):
        return self.head(self.torso(torch.cat([obs, act], dim=-1)))


def project(p, r, d, z, v_min, v_max):
    """Categorical projection of p on r + d z back onto z (the two-neighbour split)."""
    atoms = z.shape[0]
    dz = (v_max - v_min) / (atoms - 1)
    tz = (r[:, None] + d[:, None] * z[None, :]).clamp(v_min, v_max)
    b = (tz - v_min) / dz
    lo = b.floor().long().clamp(0, atoms - 1)
    hi = (lo + 1).clamp(max=atoms - 1)
    frac = b - lo.float()
    out = torch.zeros_like(p)
    out.scatter_add_(1, lo, p * (1 - frac))
    out.scatter_add_(1, hi, p * frac)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--obs", type=int, default=17)
    ap.add_argument("--act", type=int, default=6)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", choices=["f32", "bf16", "both"], default="f32",
                    help="f32 (default), bf16 (autocast around the forward passes) or both")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: networks and batch on the GPU (scripts/gpu-check.sh)")
    a = ap.parse_args()
    for precision in (["f32", "bf16"] if a.precision == "both" else [a.precision]):
        run(a, precision)


DEVICE = "cpu"


def autocast(precision):
    """bf16: PyTorch's autocast to bfloat16 (CPU: 1.13's torch.cpu.amp); f32: nothing."""
    if precision == "bf16":
        if DEVICE == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return torch.cpu.amp.autocast(dtype=torch.bfloat16)
    return contextlib.nullcontext()


def run(a, precision):
    global DEVICE
    DEVICE = a.device
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.device == "cuda":
        torch.set_default_device("cuda")  # the networks, the batch and the support below
    atoms, v_min, v_max, period = 51, -150.0, 150.0, 100
    z = torch.linspace(v_min, v_max, atoms)
    policy, critic = Policy(a.obs, a.act), Critic(a.obs, a.act, atoms)
    t_policy, t_critic = copy.deepcopy(policy), copy.deepcopy(critic)
    for p in [*t_policy.parameters(), *t_critic.parameters()]:
        p.requires_grad_(False)
    opt_p = torch.optim.Adam(policy.parameters(), lr=1e-4, eps=1e-8)
    opt_c = torch.optim.Adam(critic.parameters(), lr=1e-4, eps=1e-8)
    B = a.batch
    obs = torch.rand(B, a.obs) * 2 - 1
    act = torch.rand(B, a.act) * 2 - 1
    rew = torch.rand(B) * 2 - 1
    disc = torch.full((B,), 0.95)
    nxt = torch.rand(B, a.obs) * 2 - 1
    step_count = [0]

    def step():
        if step_count[0] % period == 0:
            t_policy.load_state_dict(policy.state_dict())
            t_critic.load_state_dict(critic.state_dict())
        step_count[0] += 1
        with torch.no_grad():
            with autocast(precision):
                logits_next = t_critic(nxt, t_policy(nxt)).float()
            p_next = F.softmax(logits_next, dim=-1)
            target = project(p_next, rew, disc, z, v_min, v_max)
        with autocast(precision):
            logits = critic(obs, act).float()
        critic_loss = -(target * F.log_softmax(logits, dim=-1)).sum(-1).mean()
        opt_c.zero_grad(set_to_none=True)
        critic_loss.backward()
        # The policy loss sees the critic before its update, as in Acme.
        with autocast(precision):
            a_pi = policy(obs).float()
            logits_pi = critic(obs, a_pi).float()
        q = (F.softmax(logits_pi, dim=-1) * z).sum(-1)
        (dqda,) = torch.autograd.grad(q.sum(), a_pi, retain_graph=True)
        norm = dqda.norm(dim=-1, keepdim=True)
        dqda = dqda * torch.clamp(1.0 / norm.clamp(min=1e-12), max=1.0)
        policy_loss = 0.5 * ((a_pi + dqda).detach() - a_pi).pow(2).sum(-1).mean()
        opt_p.zero_grad(set_to_none=True)
        policy_loss.backward()
        nn.utils.clip_grad_norm_(critic.parameters(), 40.0)
        nn.utils.clip_grad_norm_(policy.parameters(), 40.0)
        opt_c.step()
        opt_p.step()

    for _ in range(a.warmup):
        step()
    if a.device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    if a.device == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    sps = a.steps / dt
    if a.json:
        print(json.dumps({"framework": "pytorch " + torch.__version__, "obs": a.obs, "act": a.act,
                          "threads": a.threads, "batch": B, "steps": a.steps, "device": a.device,
                          "precision": precision, "steps_per_s": round(sps, 3)}), flush=True)
    else:
        print(f"pytorch {torch.__version__}: obs {a.obs} act {a.act}, {a.threads} threads, batch {B},"
              f" {precision}: {sps:.1f} learner steps/s ({1e3 / sps:.2f} ms/step)", flush=True)


if __name__ == "__main__":
    main()
