"""Approvals (seed 003): tool calls that wait for a person, durably.

A call the rules say a person must decide *parks*: the run ends and its
request is an entry of the session (:mod:`~threads.approvals.boundary`). The
session's :class:`~threads.approvals.door.ApprovalDoor` records decisions and
arms the resume; the :class:`~threads.approvals.gate.DurableApprovals` gate
judges each call (rules, then grants); the
:class:`~threads.approvals.service.ApprovalService` is the gateway-wide view:
every pending request, who may decide, grants, expiry, and asking people.
"""
