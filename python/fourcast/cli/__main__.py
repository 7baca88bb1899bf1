from fourcast.cli import console

console()
