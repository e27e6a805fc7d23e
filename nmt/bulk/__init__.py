"""Bulk translation as a sharded, resumable job, on this machine, on Ray or on any scheduler:

shards        the job on disk: its manifest (input, options, files, shards and their sha256), each
              shard's input and output, which shards are finished, the output assembled
local_pool    the shards translated by worker processes on this machine (the default)
ray_pool      the shards translated by Ray Data's actors (the extra nmt[ray])
command       `nmt translate-shards plan / run / work / assemble`, and the translator of a job's
              shards in one process (`nmt translate`'s arguments, recorded in the job)

`nmt distill` translates its teacher's translations as such a job.
"""
