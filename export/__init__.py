"""Export (``ez_robot.export``): ONNX bundles and the torch-free onboard runtime.

The robot side (numpy, onnxruntime and the compiled tree; never torch):

- ``ez_robot.export.bundle``: the bundle format (file and graph names, the manifest);
- ``ez_robot.export.runtime``: :class:`~ez_robot.export.runtime.Policy` loads a bundle
  and searches on onnxruntime;
- ``ez_robot.export.controller``: the guarded fixed-rate control loop around a policy;
- ``ez_robot.export.robot``: what the loop drives (``Robot``; a simulated and a fake one);
- ``ez_robot.export.guards``: the fallback and stop actions, the bounds and the rate limit;
- ``ez_robot.export.ticks``: the tick log and its summary (``ez-robot report --ticks``).

The training side (needs torch):

- ``ez_robot.export.onnx_graphs``: a network as the bundle's two ONNX graphs;
- ``ez_robot.export.onnx_export``: writes and checks bundles (``ez-robot export``).

Nothing is imported here, so importing the runtime never pulls in torch.
"""
