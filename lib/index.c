typedef int lr__index_placeholder;
