"""Running per-instance work beyond one process: executors (local threads, Ray), the cluster's
nodes and the movement of layers between their stores."""
