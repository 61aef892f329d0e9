"""Run-configs: the YAML file ``dspsim run`` takes (:mod:`sim.config.run_config`), its schema declared once
(:mod:`sim.config.schema`), the key reference generated from it (:mod:`sim.config.doc`), and the user kernels a
config names (:mod:`sim.config.user_kernels`)."""
