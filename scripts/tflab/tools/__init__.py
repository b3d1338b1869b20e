"""Tools that provision what the lab runs on (make swarm-sim's simulated swarm), kept apart from the
runtime: they may import the lab's modules, the lab's modules never import them (test_walls.py)."""
