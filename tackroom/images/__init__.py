"""Per-task environments built from their Dockerfiles without Docker.

A task's Dockerfile is parsed into build steps (:mod:`tackroom.images.dockerfile`), its base
image is mapped to a Debian root file system that mmdebstrap can make
(:mod:`tackroom.images.bases`), and its test script's network installs are moved to build
time (:mod:`tackroom.images.testdeps`), so that an episode needs neither Docker nor network.
"""
