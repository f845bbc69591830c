float scale = 2.0f;
float helper(float x) { return x * 3.0f + 1.0f; }
