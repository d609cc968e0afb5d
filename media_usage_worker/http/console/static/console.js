// "All shown" ticks every item's box (the server reads "all shown" without this script too).
document.addEventListener("change", function (event) {
  var box = event.target;
  var group = box.getAttribute && box.getAttribute("data-select-all");
  if (!group) return;
  document.querySelectorAll('input[data-item="' + group + '"]').forEach(function (item) {
    item.checked = box.checked;
  });
});
