"""ReachArm: a small planar MuJoCo arm that has to put its fingertip on a random target.

The robot
    A chain of ``joints`` hinge joints (1 to 8, default 3) about the vertical axis, lying
    flat above a table and seen from above; gravity is off, so only the actuators and the
    joint damping act on it.  The links have equal lengths that add up to 0.30 m.  Physics
    runs at 0.01 s per step and one decision holds its command for ``frame_skip`` steps
    (default 4, so 25 decisions per second; see ``ReachArm.control_period``).

Actuation (``actuation=``), an action in [-1, 1] per joint
    "position" (default)  a position servo on every joint, as on most robot arms (hobby
                          servos, industrial joint controllers).  The action moves each
                          joint's set-point by up to ``MAX_STEP`` rad (0.15 rad, so 3.75 rad/s);
                          0 holds the arm where it was sent.  The servo (stiffness
                          ``SERVO_KP``, damping ``SERVO_KV``) follows within a decision or two.
    "torque"              one torque motor per joint (full command: 0.2 N m): the harder
                          task, the policy has to brake the arm itself.

Observations (a ``gymnasium.spaces.Dict`` of float32 arrays)
    "joints"      cos of every joint angle, then sin of every joint angle   (2*joints,)
    "velocities"  joint angular velocities, rad/s, within +-20              (joints,)
    "fingertip"   x, y of the fingertip in the base frame, m                (2,)
    "target"      x, y of the target in the base frame, m                   (2,)
    "lag"         position actuation only: set-point minus joint angle, rad, within +-pi
                  (joints,)
    "to_target"   target minus fingertip, m (2,): the network need not subtract two inputs
                  to centimetre precision itself (measured: seeds 0-3 of docs/your_own_robot.md's
                  command succeed in 77%, 94%, 87%, 81% of 100 episodes with it, 84%, 83%,
                  64%, 84% without); ``to_target=False`` leaves it out
    ``gymnasium.spaces.Dict`` sorts the keys of a plain dict, so the space (and every
    observation) stores them alphabetically: fingertip, joints, [lag,] target, [to_target,] velocities.
    Flatten them in ``observation_space.spaces`` order.

Reset
    The arm starts at rest near its home pose, as a robot arm does (and as Gymnasium's
    Reacher): the base joint along +x, the other joints curled gently (together about 1.5
    rad), every joint jittered by up to 0.1 rad; the set-points on the joints.  The target
    is drawn uniformly (by area) in the workspace in front of the base: the half annulus
    0.08 m to 0.27 m from it with x >= 0.  A one-joint arm can only reach the circle of
    radius 0.30 m, so there the target lies on that half circle.  Everything random comes
    from ``self.np_random``: the same seed gives the same episode.

Reward and success
    reward = 1[distance < success_radius] - distance(fingertip, target) - action_cost * sum(action**2),
    every decision: the distance guides the fingertip in, the bonus (``SUCCESS_BONUS``, as
    dm_control's reacher pays 1 inside its target) makes staying on the target worth more
    than hovering a few centimetres away.
    ``info["distance"]`` is that distance in metres and ``info["is_success"]`` says whether
    it is below ``success_radius`` (default 0.03 m) at this decision.  An episode never
    terminates; it is truncated after ``max_steps`` decisions (default 50, i.e. 2 s).
    It counts as solved when ``is_success`` holds at its last decision.

Training it with ez-robot (seeds 0-4 of this command: 98%, 85%, 93%, 90%, 97% success on 100
episodes after 20k decisions, 29 min alone on 2 cores; see docs/your_own_robot.md)
    ez-robot train --task examples/arm/reach_arm.py:make_arm --budget 20k \
        --set env.action_mode=factorized --set replay.min_replay_size=1000 \
        --set train.batch_size=32 --set train.lr_final=0.03

Run this file directly to see the scripted reference controller's success rate:
    python examples/arm/reach_arm.py
"""
from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering; read when mujoco is imported

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
import gymnasium  # noqa: E402
from gymnasium import spaces  # noqa: E402

TOTAL_LENGTH = 0.30       # m, the links' lengths together
TARGET_MIN_RADIUS = 0.08  # m, the target annulus (arms of two or more joints)
TARGET_MAX_RADIUS = 0.27
MOTOR_GEAR = 0.2          # N m at a command of 1
JOINT_DAMPING = 0.05      # N m s / rad
JOINT_ARMATURE = 0.002    # kg m^2, rotor inertia; also keeps the light distal links tame
TIMESTEP = 0.01           # s
INITIAL_CURL = 1.5        # rad, shared by the joints after the base one (the home pose)
HOME_JITTER = 0.1         # rad, the most any joint starts away from the home pose
TARGET_MAX_ANGLE = np.pi / 2  # rad, the workspace: targets within this angle of +x
MAX_JOINT_SPEED = 20.0    # rad/s, the bound of the velocity observations (the motors reach about 6)
MAX_STEP = 0.15           # rad, the largest set-point move per decision (position actuation)
SERVO_KP = 20.0           # N m / rad, the position servo's stiffness
SERVO_KV = 0.6            # N m s / rad, its damping
ACTUATIONS = ("position", "torque")
SUCCESS_BONUS = 1.0       # reward per decision with the fingertip on the target
ACTION_COST = 0.01        # reward lost per unit of sum(action**2), every decision


def arm_mjcf(joints: int = 3, actuation: str = "position") -> str:
    """The MJCF text of a flat arm with ``joints`` hinges about z, seen by a camera above."""
    if not isinstance(joints, (int, np.integer)) or isinstance(joints, bool) or not 1 <= joints <= 8:
        raise ValueError(f"joints must be an integer in [1, 8], got {joints!r}")
    if actuation not in ACTUATIONS:
        raise ValueError(f"actuation must be one of {ACTUATIONS}, got {actuation!r}")
    link = TOTAL_LENGTH / joints
    height = 0.02  # the arm floats just above the table

    chain_open, chain_close = [], []
    for i in range(joints):
        pos = f"0 0 {height}" if i == 0 else f"{link:.6f} 0 0"
        rgba = "0.85 0.45 0.15 1" if i % 2 == 0 else "0.95 0.65 0.25 1"
        chain_open.append(
            f'<body name="link{i}" pos="{pos}">'
            f'<joint name="joint{i}" type="hinge" axis="0 0 1"/>'
            f'<geom name="link{i}" type="capsule" fromto="0 0 0 {link:.6f} 0 0" size="0.01" rgba="{rgba}"/>'
        )
        chain_close.append("</body>")
    tip = f'<site name="fingertip" pos="{link:.6f} 0 0" size="0.012" rgba="0.1 0.3 0.9 1"/>'
    chain = "".join(chain_open) + tip + "".join(reversed(chain_close))

    if actuation == "torque":
        actuators = "".join(
            f'<motor name="motor{i}" joint="joint{i}" gear="{MOTOR_GEAR}" ctrlrange="-1 1" ctrllimited="true"/>'
            for i in range(joints))
    else:  # the control is the joint's set-point in rad, unbounded like the joints
        actuators = "".join(
            f'<position name="servo{i}" joint="joint{i}" kp="{SERVO_KP}" kv="{SERVO_KV}" ctrllimited="false"/>'
            for i in range(joints))
    return f"""<mujoco model="reach_arm_{joints}">
  <compiler angle="radian"/>
  <option timestep="{TIMESTEP}" gravity="0 0 0" integrator="implicitfast">
    <flag contact="disable"/>
  </option>
  <default>
    <joint damping="{JOINT_DAMPING}" armature="{JOINT_ARMATURE}" limited="false"/>
    <geom contype="0" conaffinity="0" density="1000"/>
  </default>
  <visual>
    <headlight ambient="0.15 0.15 0.15" diffuse="0.25 0.25 0.25" specular="0 0 0"/>
  </visual>
  <asset>
    <texture name="grid" type="2d" builtin="checker" width="256" height="256"
             rgb1="0.55 0.58 0.62" rgb2="0.45 0.48 0.52"/>
    <material name="grid" texture="grid" texrepeat="8 8"/>
  </asset>
  <worldbody>
    <light name="top" pos="0 0 1.5" dir="0 0 -1" diffuse="0.5 0.5 0.5" specular="0.1 0.1 0.1"/>
    <camera name="top" pos="0 0 0.85" xyaxes="1 0 0 0 1 0" fovy="45"/>
    <geom name="table" type="plane" size="0.5 0.5 0.01" material="grid"/>
    <geom name="base" type="cylinder" size="0.025 0.01" pos="0 0 0.01" rgba="0.3 0.3 0.3 1"/>
    <site name="target" pos="0.15 0 {height}" size="0.015" rgba="0.9 0.1 0.1 0.8"/>
    {chain}
  </worldbody>
  <actuator>
    {actuators}
  </actuator>
</mujoco>
"""


class ReachArm(gymnasium.Env):
    """A planar arm of ``joints`` hinges that must hold its fingertip on a random target."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": int(round(1.0 / (TIMESTEP * 4)))}

    def __init__(self, joints: int = 3, frame_skip: int = 4, max_steps: int = 50,
                 success_radius: float = 0.03, actuation: str = "position",
                 action_cost: float = ACTION_COST, to_target: bool = True, render_mode: str | None = None):
        def is_int(x):
            return isinstance(x, (int, np.integer)) and not isinstance(x, bool)

        def is_number(x):
            return isinstance(x, (int, float, np.number)) and not isinstance(x, bool)

        if not is_int(joints) or not 1 <= joints <= 8:
            raise ValueError(f"joints must be an integer in [1, 8], got {joints!r}")
        if not is_int(frame_skip) or frame_skip < 1:
            raise ValueError(f"frame_skip must be a positive integer, got {frame_skip!r}")
        if not is_int(max_steps) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
        if not is_number(success_radius) or not 0.0 < float(success_radius) < TOTAL_LENGTH:
            raise ValueError(f"success_radius must be a number in (0, {TOTAL_LENGTH}) metres, got {success_radius!r}")
        if not is_number(action_cost) or not 0.0 <= float(action_cost) < np.inf:
            raise ValueError(f"action_cost must be a non-negative finite number, got {action_cost!r}")
        if actuation not in ACTUATIONS:
            raise ValueError(f"actuation must be one of {ACTUATIONS}, got {actuation!r}")
        if not isinstance(to_target, (bool, np.bool_)):
            raise ValueError(f"to_target must be true or false, got {to_target!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of {self.metadata['render_modes']}, got {render_mode!r}")

        self.joints = int(joints)
        self.frame_skip = int(frame_skip)
        self.action_cost = float(action_cost)
        self.max_steps = int(max_steps)
        self.success_radius = float(success_radius)
        self.actuation = actuation
        self.to_target = bool(to_target)
        self.render_mode = render_mode
        self.metadata = {**type(self).metadata, "render_fps": int(round(1.0 / (TIMESTEP * self.frame_skip)))}

        self.model = mujoco.MjModel.from_xml_string(arm_mjcf(self.joints, actuation))
        self.data = mujoco.MjData(self.model)
        self._tip_id = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SITE, "fingertip")
        self._target_id = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SITE, "target")
        self._renderer = None
        self._steps = 0

        self.action_space = spaces.Box(-1.0, 1.0, (self.joints,), np.float32)
        bound = TOTAL_LENGTH + 0.05
        observations = {
            "joints": spaces.Box(-1.0, 1.0, (2 * self.joints,), np.float32),
            "velocities": spaces.Box(-MAX_JOINT_SPEED, MAX_JOINT_SPEED, (self.joints,), np.float32),
            "fingertip": spaces.Box(-bound, bound, (2,), np.float32),
            "target": spaces.Box(-bound, bound, (2,), np.float32),
        }
        if actuation == "position":
            observations["lag"] = spaces.Box(-np.pi, np.pi, (self.joints,), np.float32)
        if self.to_target:
            observations["to_target"] = spaces.Box(-2 * bound, 2 * bound, (2,), np.float32)
        self.observation_space = spaces.Dict(observations)

    @property
    def control_period(self) -> float:
        """Simulated seconds per decision: the physics timestep times ``frame_skip``."""
        return float(self.model.opt.timestep) * self.frame_skip

    # -- state read-outs ---------------------------------------------------------------
    @property
    def fingertip(self) -> np.ndarray:
        return self.data.site_xpos[self._tip_id, :2].copy()

    @property
    def target(self) -> np.ndarray:
        return self.model.site_pos[self._target_id, :2].copy()

    def distance(self) -> float:
        return float(np.linalg.norm(self.fingertip - self.target))

    def _observation(self) -> dict:
        q = self.data.qpos
        values = {
            "joints": np.concatenate([np.cos(q), np.sin(q)]),
            "velocities": np.clip(self.data.qvel, -MAX_JOINT_SPEED, MAX_JOINT_SPEED),
            "fingertip": self.fingertip,
            "target": self.target,
        }
        if self.actuation == "position":
            values["lag"] = np.clip(self.data.ctrl - q, -np.pi, np.pi)
        if self.to_target:
            values["to_target"] = self.target - self.fingertip
        # in the space's own key order, so flattening either gives the same layout
        return {k: np.asarray(values[k], dtype=np.float32) for k in self.observation_space.spaces}

    # -- the gymnasium API ---------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        rng = self.np_random
        mujoco.mj_resetData(self.model, self.data)

        qpos = np.empty(self.joints)
        qpos[:] = rng.uniform(-HOME_JITTER, HOME_JITTER, self.joints)
        if self.joints > 1:
            qpos[1:] += INITIAL_CURL / (self.joints - 1)
        self.data.qpos[:] = qpos
        self.data.qvel[:] = 0.0
        self.data.ctrl[:] = qpos if self.actuation == "position" else 0.0

        if self.joints == 1:  # one hinge reaches only its own circle
            radius = TOTAL_LENGTH
        else:  # uniform by area in the annulus
            radius = np.sqrt(rng.uniform(TARGET_MIN_RADIUS ** 2, TARGET_MAX_RADIUS ** 2))
        angle = rng.uniform(-TARGET_MAX_ANGLE, TARGET_MAX_ANGLE)
        self.model.site_pos[self._target_id, :2] = radius * np.cos(angle), radius * np.sin(angle)

        mujoco.mj_forward(self.model, self.data)
        self._steps = 0
        distance = self.distance()
        return self._observation(), {"distance": distance, "is_success": distance < self.success_radius}

    def step(self, action):
        action = np.clip(np.asarray(action, dtype=np.float64).reshape(self.joints),
                         self.action_space.low, self.action_space.high)
        if self.actuation == "position":
            self.data.ctrl[:] += MAX_STEP * action
        else:
            self.data.ctrl[:] = action
        for _ in range(self.frame_skip):
            mujoco.mj_step(self.model, self.data)
        # mj_step leaves positions computed for the state before its last update: refresh
        # them (and the com frames that mj_jacSite needs) for the state we report
        mujoco.mj_kinematics(self.model, self.data)
        mujoco.mj_comPos(self.model, self.data)
        self._steps += 1

        distance = self.distance()
        success = distance < self.success_radius
        reward = SUCCESS_BONUS * success - distance - self.action_cost * float(np.sum(action ** 2))
        truncated = self._steps >= self.max_steps
        info = {"distance": distance, "is_success": success}
        return self._observation(), reward, False, truncated, info

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        if self._renderer is None:
            self._renderer = mujoco.Renderer(self.model, height=240, width=320)
        self._renderer.update_scene(self.data, camera="top")
        return self._renderer.render()

    def close(self):
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None


def make_arm(joints: int = 3, max_steps: int = 50, success_radius: float = 0.03,
             actuation: str = "position", action_cost: float = ACTION_COST, to_target: bool = True,
             render_mode: str | None = None) -> ReachArm:
    """The factory for ``--task examples/arm/reach_arm.py:make_arm`` (arguments checked by ReachArm)."""
    return ReachArm(joints=joints, max_steps=max_steps, success_radius=success_radius,
                    actuation=actuation, action_cost=action_cost, to_target=to_target, render_mode=render_mode)


# the scripted controller's gains
TIP_GAIN = 8.0            # 1/s, fingertip speed asked per metre of distance
TIP_SPEED = 1.2           # m/s, the cap on that speed
JACOBIAN_DAMPING = 0.02   # m, lambda: keeps the joint speeds finite near a straight arm
VELOCITY_GAIN = 0.1       # N m s / rad, torque per unit of joint-velocity error


def scripted_action(env: ReachArm) -> np.ndarray:
    """A reference controller: resolved-rate reaching with a damped least-squares Jacobian.

    It asks the fingertip to move straight at the target (speed ``TIP_GAIN`` times the
    distance, capped at ``TIP_SPEED``), turns that into joint velocities with the damped
    inverse ``J^T (J J^T + lambda^2 I)^-1`` of the fingertip's x-y Jacobian (``mj_jacSite``),
    and commands, with torque actuation, the torque that holds those velocities against the
    joint damping plus a velocity-error term; with position actuation, the set-point move
    that those velocities make in one decision.  The command is clipped to [-1, 1].
    """
    env = env.unwrapped
    model, data = env.model, env.data
    jacp = np.zeros((3, model.nv))
    mujoco.mj_jacSite(model, data, jacp, None, env._tip_id)
    jac = jacp[:2]

    tip_velocity = TIP_GAIN * (env.target - env.fingertip)
    speed = np.linalg.norm(tip_velocity)
    if speed > TIP_SPEED:
        tip_velocity *= TIP_SPEED / speed
    joint_velocity = jac.T @ np.linalg.solve(jac @ jac.T + JACOBIAN_DAMPING ** 2 * np.eye(2), tip_velocity)

    if env.actuation == "position":
        return np.clip(joint_velocity * env.control_period / MAX_STEP, -1.0, 1.0).astype(np.float32)
    torque = JOINT_DAMPING * joint_velocity + VELOCITY_GAIN * (joint_velocity - data.qvel)
    return np.clip(torque / MOTOR_GEAR, -1.0, 1.0).astype(np.float32)


def evaluate(policy, episodes: int = 100, seed: int = 0, **kwargs) -> tuple[float, float]:
    """The success rate (``is_success`` at the last decision) and mean return of ``policy(env)``."""
    env = make_arm(**kwargs)
    successes, returns = 0, []
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        total, done, info = 0.0, False, {}
        while not done:
            _, reward, terminated, truncated, info = env.step(policy(env))
            total += reward
            done = terminated or truncated
        successes += bool(info["is_success"])
        returns.append(total)
    env.close()
    return successes / episodes, float(np.mean(returns))


if __name__ == "__main__":
    rate, mean_return = evaluate(scripted_action, episodes=100)
    print(f"scripted controller, 100 episodes: success rate {rate:.0%}, mean return {mean_return:.3f}")
