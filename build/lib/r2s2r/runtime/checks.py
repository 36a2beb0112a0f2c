"""Checks the runtime makes before it runs a policy, and on every chunk it is given."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from r2s2r.policy.base import Policy
from r2s2r.rig.interfaces import Rig
from r2s2r.sim.contract import Contract, ContractError

# How far outside the supervisor's workspace box a chunk's target may lie before the chunk is
# refused (the supervisor clamps it onto the box).
WORKSPACE_TOLERANCE_M = 0.02


def check_policy_fits(policy: Policy, rig: Rig, control_hz: float) -> Contract:
    """The contract the policy acts in on ``rig``, or ``ContractError`` saying every way the
    policy's metadata does not fit the rig (robot, action mode, sizes, cameras, rate)."""
    meta = policy.metadata
    emb = rig.embodiment
    diff: list[str] = []
    if meta.embodiment != emb.name:
        diff.append(f"the policy drives embodiment {meta.embodiment!r}, this rig is {emb.name!r}")
    if meta.action_mode != "tcp":
        diff.append(f"the policy acts in {meta.action_mode!r} mode, this rig takes 'tcp' targets")
    rig_contract = Contract.of(emb, "tcp", tuple(rig.cameras))
    if meta.action_dim != rig_contract.action_dim:
        diff.append(
            f"the policy's actions have {meta.action_dim} entries, this rig's "
            f"{rig_contract.action_dim} ({emb.num_arms} arms x ({rig_contract.arm_action_dim} + "
            f"{emb.hand_dof} hand joints))"
        )
    if meta.state_dim and meta.state_dim != rig_contract.state_dim:
        diff.append(
            f"the policy reads {meta.state_dim} state entries, this rig gives "
            f"{rig_contract.state_dim}"
        )
    lacking = [c for c in meta.cameras if c not in rig.cameras]
    if lacking:
        diff.append(
            f"the policy reads cameras {lacking} this rig lacks (it has {list(rig.cameras)})"
        )
    if abs(meta.control_hz - control_hz) > 1e-6:
        diff.append(f"the policy acts at {meta.control_hz:g} Hz, the runtime at {control_hz:g} Hz")
    theirs = getattr(policy, "contract", None)
    if not diff and isinstance(theirs, Contract):
        rig_contract.check_compatible(theirs, what="the policy", this="this rig", views="subset")
    if diff:
        raise ContractError("the policy does not fit this rig: " + "; ".join(diff))
    return Contract.of(emb, "tcp", tuple(meta.cameras))


def validate_chunk(
    actions: np.ndarray | None,
    shape: tuple[int, int],
    contract: Contract,
    max_jump_m: float,
    first: int,
    tcp_now: np.ndarray,
    workspace: tuple[Sequence[float], Sequence[float]] | None = None,
) -> str:
    """Why a chunk (H, A) must not run ("" if it may): a wrong shape, a non-finite value, a
    TCP target from action ``first`` on outside the ``workspace`` box (its (3,) lower and
    upper corners), a first executed TCP target (action ``first``) further than
    ``max_jump_m`` from where the arms are (``tcp_now`` (S, 7)), or consecutive targets that
    far apart."""
    if actions is None or actions.shape != shape:
        got = None if actions is None else actions.shape
        return f"expected a chunk of shape {shape}, got {got}"
    bad = ~np.isfinite(actions)
    if bad.any():
        rows = np.unique(np.nonzero(bad)[0])
        return f"non-finite values in {bad.sum()} entries (actions {rows[:5].tolist()} ...)"
    arm, _ = contract.split_action(actions)
    pos = arm[..., :3]  # (H, S, 3)
    first = min(max(first, 0), len(actions) - 1)
    if workspace is not None:
        # A target well outside the box would be clamped by the supervisor: the arm would
        # not do what the policy meant, so the chunk is refused as a whole. Within
        # ``WORKSPACE_TOLERANCE_M`` of a face (a learned policy grazing the belt-side floor)
        # the supervisor's clamp is enough.
        low = np.asarray(workspace[0]) - WORKSPACE_TOLERANCE_M
        high = np.asarray(workspace[1]) + WORKSPACE_TOLERANCE_M
        outside = ((pos[first:] < low) | (pos[first:] > high)).any(axis=-1)  # (H - first, S)
        if outside.any():
            i, s = (int(v) for v in np.argwhere(outside)[0])
            side = contract.embodiment.sides[s]
            return (
                f"its target for the {side} arm at action {first + i} "
                f"{np.round(pos[first + i, s], 3).tolist()} lies outside the workspace "
                f"{np.asarray(workspace[0]).tolist()} .. {np.asarray(workspace[1]).tolist()} "
                f"(by more than {WORKSPACE_TOLERANCE_M} m)"
            )
    jump = np.linalg.norm(pos[first] - tcp_now[:, :3], axis=-1)
    if (jump > max_jump_m).any():
        side = contract.embodiment.sides[int(np.argmax(jump))]
        return (
            f"its first target for the {side} arm is {jump.max():.3f} m from the arm "
            f"(limit {max_jump_m} m)"
        )
    steps = np.linalg.norm(np.diff(pos, axis=0), axis=-1)
    if len(steps) and (steps > max_jump_m).any():
        i = int(np.argmax(steps.max(axis=1)))
        return (
            f"it jumps {steps.max():.3f} m between actions {i} and {i + 1} (limit {max_jump_m} m)"
        )
    return ""
