"""The delegation pool: bounded concurrent child sessions for a parent session.

``pool`` runs delegations (slots, receipts, cancel); ``slots`` is its first-in
first-out slot count; ``outcomes`` words how a child's run ended; ``ledger``
reads a session's receipts and resolves a delegating call; ``tools`` is the
synchronous ``delegate_task``; ``recovery`` settles or resumes at start-up
what a stopped gateway left unsettled.
"""
