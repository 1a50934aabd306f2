"""Heterogeneous graphs (several node and edge types): the contract every loader returns and
the generator (:mod:`.contract`), OGB and DGL CSV folders (:mod:`.files`), typed chunked folders
(:mod:`.chunked`)."""
