"""The trainers' runtime, shared by SFT and RL (and the judge): device, precision, the process group
and FSDP2 sharding, sharded checkpoints, meta-device init, LR schedules. Neither trainer imports the other."""
