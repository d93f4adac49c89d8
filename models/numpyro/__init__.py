"""NumPyro models and guides, one module per method: ``svgp``, ``sgpr``, ``gpr``, ``sgpmc``, ``vgp``, ``gpmc``,
``bsgp``, ``deep_bsgp``, ``deep_svgp``, ``selective``, ``selective_deep``, ``gplvm``, ``selective_gplvm``, ``idsgp``,
``sas_gplvm``; ``_base`` holds the one base class and the helpers they share."""
