"""Multi-turn episodes (issue 55): environments that answer the model turn by turn, rollouts kept
as the exact tokens the policy sampled plus the chat template's environment tokens, and tools run
in the sandbox. docs/multi-turn.md describes the protocol and the tool format."""
