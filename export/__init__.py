"""Export (``ez_robot.export``): ONNX networks and the torch-free onboard runtime.

- ``ez_robot.export.runtime`` (the robot side): :class:`~ez_robot.export.runtime.Policy`
  loads a bundle and searches on onnxruntime; it imports numpy, onnxruntime and the
  compiled tree, never torch.
- ``ez_robot.export.controller``: a fixed-rate control loop around a policy.
- ``ez_robot.export.onnx_export`` (the training side, needs torch): writes and checks
  bundles (``ez-robot export``).

Nothing is imported here, so importing the runtime never pulls in torch.
"""
