"""Physics fields for DS-MPNN: generated Darcy flow (:mod:`.darcy`) and airfoil potential flow
(:mod:`.airfoil`) samples drawn on a process pool (:mod:`.pool`), and users' field files
(:mod:`.files`)."""
