typedef int lr__ring_placeholder;
