%% @doc Declarative specification of the multi-value register: the values of the assigns no
%% other assign happened after, as an ordset (`[]' when there is none).
-module(hm_spec_mvreg).
-include_lib("proper/include/proper.hrl").
-export([gen_op/0, spec/1]).

gen_op() -> {assign, oneof([x, y, z])}.

spec(History) -> lists:usort([V || {_, _, {assign, V}, _} <- hm_spec:maximal(History)]).
