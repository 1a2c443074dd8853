"""The simulated GPU (`--device sim`): model stand-ins timed by the H200 cost model."""
