"""What can go wrong, named once: the errors a user reads, the start's wait for a dependency, the crash tests'
fault points.
"""
