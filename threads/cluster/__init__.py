"""Scale-out: several gateway processes on one Redis.

Each process is a *node* (:mod:`threads.node`). Session keys, the cron
scheduler and each bot's connection are owned through expiring leases with
fencing tokens (:mod:`threads.cluster.leases`); a wake for a key another
node owns travels to it on that node's Redis Stream (:mod:`threads.cluster.wakes`);
:mod:`threads.cluster.node` keeps this node's leases alive, takes over the
keys of a node that died and hands its own over when it drains.
"""
