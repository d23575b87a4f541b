"""The share group (`kafka.group_type = "share"`): its group type, the group configs the job owns, and the broker's
dead-letter topic that only a share group writes to."""
