// A shared library with no kiln plug-in entry points: load_plugin must refuse it by name.
extern "C" int not_a_kiln_plugin() { return 42; }
