// The floor of a Swift process: the runtime and the standard library only.
print("hello")
