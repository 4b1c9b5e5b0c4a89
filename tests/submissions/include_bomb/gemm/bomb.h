#if __INCLUDE_LEVEL__ < 40
#include "bomb.h"
#include "bomb.h"
#endif
