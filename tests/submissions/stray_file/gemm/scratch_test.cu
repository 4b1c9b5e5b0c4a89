// A student's scratch test, never compiled by the grader.
#include "../x"
int main() { return 0; }
