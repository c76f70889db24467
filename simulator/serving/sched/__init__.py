"""Scheduler policies, after vLLM v1's `core/sched/`: the interface (`StepPlan`, `ReplicaView`), the config of scheduler limits, the policies and their registry."""
