"""Making models: training the house pair and its drafters, and building cost twins of them (``twin``)."""
