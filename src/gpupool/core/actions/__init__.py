"""A cycle's actions, in order: allocate, consolidate, reclaim, preempt, node-level."""
