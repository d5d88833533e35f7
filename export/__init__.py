"""Export (``ez_robot.export``): ONNX networks and the torch-free onboard runtime arrive
with the export issue."""
