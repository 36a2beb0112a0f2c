"""Reading a rig's observation: the one code path the recorder and the runtime share.

``observe`` samples every stream a contract carries on one tick — the views it names, each
arm's TCP pose and joints, each hand's joints and, where asked, the presented object's pose —
and builds the contract's observation dict from them (``Contract.observation``), with the
conveyor drive's speed beside it (``belt_speed``, m/s: every rig's conveyor reports one).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from r2s2r.rig.interfaces import Rig
from r2s2r.sim.contract import Contract, ContractError


def observe(
    rig: Rig,
    contract: Contract,
    instruction: str,
    images: bool = True,
    environment_state: bool = False,
) -> dict[str, Any]:
    """The observation of ``rig`` now in ``contract``'s form: with the contract's camera
    views unless ``images`` is False (proprio only: a reading that costs no rendering), and
    with the presented object's pose where ``environment_state`` (``ContractError`` where
    the rig does not track it)."""
    sides = contract.embodiment.sides
    arms = [rig.arms[s].state() for s in sides]
    hands = [rig.hands[s].state() for s in sides]
    views = {c: rig.cameras[c].read().image for c in contract.cameras} if images else None
    env_state = None
    if environment_state:
        env_state = rig.presenter.object_pose()
        if env_state is None:
            raise ContractError(
                "this rig does not track the presented object, so an observation cannot "
                "carry its pose (environment_state)"
            )
    obs = contract.observation(
        np.stack([a.tcp_pose for a in arms]),
        np.stack([a.q for a in arms]),
        np.stack([h.q for h in hands]),
        instruction,
        views,
        environment_state=env_state,
    )
    obs["belt_speed"] = float(rig.conveyor.speed())
    return obs
