"""What runs inside the containers: the trainer (train), the launcher around a user's script
(launch), the Keras callback a user's script imports (callback), the delay proxy (linkproxy) and
the trainer's watchdog (peerwait). Each imports only these and core/, never the host's Docker or
Compose code (tests/unit/test_walls.py); linkproxy and peerwait need no TensorFlow."""
