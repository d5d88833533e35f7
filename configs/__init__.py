"""YAML presets, one per task family (installed as the data package ez_robot.configs)."""
