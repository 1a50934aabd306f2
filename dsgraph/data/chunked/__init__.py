"""DGL's chunked graph format: the folder read chunk by chunk (:mod:`.folder`, :mod:`.io`), the
contract the large-graph partitioner reads (:mod:`.contract`), a one-type folder as a training
dataset (:mod:`.dataset`), the streaming writer (:mod:`.write`) and synthetic graphs generated
chunk by chunk (:mod:`.synthetic`). Typed folders: :mod:`dsgraph.data.hetero.chunked`."""
