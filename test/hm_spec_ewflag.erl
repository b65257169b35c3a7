%% @doc Declarative specification of the enable-wins flag: `true' iff the causally maximal
%% operations include an `enable' (`false' when there is none).
-module(hm_spec_ewflag).
-include_lib("proper/include/proper.hrl").
-export([gen_op/0, spec/1]).

gen_op() -> oneof([enable, disable]).

spec(History) -> lists:any(fun({_, _, Op, _}) -> Op =:= enable end, hm_spec:maximal(History)).
