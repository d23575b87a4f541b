"""The classic consumer group (`kafka.group_type = "consumer"`): its group type, offsets committed after the Delta
commit."""
