"""The trainers users call: the shared estimator (:mod:`.base`) and the full and
forward/backward trainers on top of it."""
